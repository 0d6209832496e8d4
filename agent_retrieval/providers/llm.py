"""Chat models from the Context: OpenAI or any OpenAI-compatible server (Ollama, vLLM), or none offline."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from agent_retrieval.context import Context
from agent_retrieval.core.redaction import protect


def make_chat_model(
    context: Context,
    *,
    model: str | None = None,
    temperature: float = 0.0,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> BaseChatModel | None:
    """A chat model, or None when no key or compatible server is configured (callers then degrade)."""
    if not context.has_chat_model:
        return None
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    protect(context.openai_api_key)  # the SDK's errors may quote a refused key
    return ChatOpenAI(
        # Field names, not their aliases (model=, api_key=): the same call, and a type checker can follow it.
        model_name=model or context.openai_chat_model,
        openai_api_key=SecretStr(context.openai_api_key or "not-needed"),  # self-hosted servers take any key
        openai_api_base=context.openai_base_url or None,
        temperature=temperature,
        request_timeout=timeout or context.request_timeout_seconds,
        max_retries=context.max_retries if max_retries is None else max_retries,
    )
