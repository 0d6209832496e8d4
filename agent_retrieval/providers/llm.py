"""Chat models from the chat settings: OpenAI or a compatible server (Ollama, vLLM), or none offline."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from agent_retrieval.context import ChatSettings
from agent_retrieval.core.redaction import protect


def make_chat_model(
    settings: ChatSettings,
    *,
    model: str | None = None,
    temperature: float = 0.0,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> BaseChatModel | None:
    """A chat model, or None when no key or compatible server is configured (callers then degrade)."""
    if not settings.configured:
        return None
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    protect(settings.openai_api_key.get_secret_value())  # the SDK's errors may quote a refused key
    return ChatOpenAI(
        # Field names, not their aliases (model=, api_key=): the same call, and a type checker can follow it.
        model_name=model or settings.openai_chat_model,
        openai_api_key=settings.openai_api_key or SecretStr("not-needed"),  # self-hosted servers take any key
        openai_api_base=settings.openai_base_url or None,
        temperature=temperature,
        request_timeout=timeout or settings.request_timeout_seconds,
        max_retries=settings.max_retries if max_retries is None else max_retries,
    )
