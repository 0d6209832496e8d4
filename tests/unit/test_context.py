"""The Context: defaults, environment fallback, validation with readable errors, masked secrets."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from agent_retrieval.context import Context
from agent_retrieval.errors import ConfigError


def test_defaults_match_the_hyde_seed():
    context = Context()
    assert (context.use_hyde, context.hyde_num_docs, context.hyde_skip_max_words) == (False, 2, 5)
    assert 30 <= context.hyde_cache_ttl_seconds <= 60
    assert 0 <= context.hyde_temperature <= 0.2
    assert context.embedding_provider == "local"
    assert context.hyde_chat_model == context.openai_chat_model
    assert context.db_path == "agent_retrieval.db"


def test_every_setting_has_a_description():
    assert all(f.metadata.get("description") for f in fields(Context))


def test_environment_fills_fields_left_at_their_default(monkeypatch):
    monkeypatch.setenv("USE_HYDE", "true")
    monkeypatch.setenv("HYDE_NUM_DOCS", "3")
    monkeypatch.setenv("HYDE_MODEL", "llama3")
    monkeypatch.setenv("AGENT_RETRIEVAL_DB", "/tmp/x.db")
    monkeypatch.setenv("USE_VOYAGE_EMBEDDINGS", "1")
    context = Context()
    assert (context.use_hyde, context.hyde_num_docs, context.hyde_chat_model) == (True, 3, "llama3")
    assert context.db_path == "/tmp/x.db"
    assert context.embedding_provider == "voyage"
    assert Context(hyde_num_docs=4).hyde_num_docs == 4  # an explicit value wins


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("HYDE_NUM_DOCS", "two", "HYDE_NUM_DOCS='two' is not a valid int"),
        ("USE_HYDE", "maybe", "USE_HYDE='maybe' is not a valid bool"),
        ("HYDE_TEMPERATURE", "0.7", "hyde_temperature must be between 0 and 0.2"),
        ("EMBEDDING_PROVIDER", "cohere", "embedding_provider must be one of local, voyage, openai"),
    ],
)
def test_bad_environment_values_name_the_setting_and_what_is_allowed(monkeypatch, env, value, message):
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Context()


def test_bad_arguments_are_rejected():
    with pytest.raises(ConfigError, match="chunk_overlap must be smaller"):
        Context(chunk_size=200, chunk_overlap=200)
    with pytest.raises(ConfigError, match=r"rrf_k must be between 1 and 1000"):
        Context(rrf_k=0)


def test_secrets_are_masked_in_describe_and_repr():
    context = Context(openai_api_key="sk-very-secret", voyage_api_key="pa-secret")
    text = repr(context) + str(context.describe())
    assert "sk-very-secret" not in text and "pa-secret" not in text
    assert context.has_chat_model


def test_the_readme_table_lists_every_setting_as_the_context_describes_it():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for f in fields(Context):
        env = f.metadata.get("env") or f.name.upper()
        default = f"`{f.default}`" if f.default != "" else "(unset)"
        assert f"| `{f.name}` | `{env}` | {default} | {f.metadata['description']} |" in readme, f.name
