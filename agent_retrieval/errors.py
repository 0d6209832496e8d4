"""The errors agent-retrieval raises: each message says what is wrong and what to do."""


class AgentRetrievalError(Exception):
    """Base class; the message is meant for the user (or the model calling a tool)."""


class ConfigError(AgentRetrievalError, ValueError):
    """A setting has a value outside what is allowed."""


class InvalidRequest(AgentRetrievalError, ValueError):
    """A search or ingest request is malformed: the message names the field and the allowed values."""


class EmbeddingError(AgentRetrievalError):
    """The embedding provider failed or returned something unusable."""


class EmbeddingModelMismatch(AgentRetrievalError):
    """The store holds vectors of another embedding model or dimension."""

    def __init__(self, stored: str, stored_dim: int, current: str, current_dim: int | None):
        dim = f", dimension {current_dim}" if current_dim else ""
        super().__init__(
            f"the store's vectors come from {stored} (dimension {stored_dim}) but the configured "
            f"embedder is {current}{dim}; vectors of different models cannot be mixed. Run "
            f"`agent-retrieval reembed` to re-embed the store with {current}, or configure {stored} again."
        )
        self.stored, self.current = stored, current


class DimensionMismatch(EmbeddingModelMismatch):
    """The store's SQL was made for vectors of another dimension (fixed per schema on Postgres, Supabase)."""

    def __init__(self, message: str):
        AgentRetrievalError.__init__(self, message)
        self.stored = self.current = ""


class StoreError(AgentRetrievalError):
    """The store could not be read or written."""


class StoreUnavailable(StoreError):
    """The store could not be reached (server down, restarting, network lost): the same call may succeed
    once it is back; every store call is safe to repeat."""
