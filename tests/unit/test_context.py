"""The Context: defaults, the environment read only by from_env, validation with readable errors, masked
secrets."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from agent_retrieval.context import Context, RunSettings, _variables, settings_markdown
from agent_retrieval.errors import ConfigError
from agent_retrieval.providers.embeddings import Embedder
from tests.conftest import WordHashEmbeddings


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


def test_from_env_reads_each_setting_not_given_and_context_reads_nothing(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_USE_HYDE", "true")
    monkeypatch.setenv("AGENT_RETRIEVAL_HYDE_NUM_DOCS", "3")
    monkeypatch.setenv("AGENT_RETRIEVAL_HYDE_MODEL", "llama3")
    monkeypatch.setenv("AGENT_RETRIEVAL_DB", "/tmp/x.db")
    monkeypatch.setenv("AGENT_RETRIEVAL_EMBEDDING_PROVIDER", "voyage")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    context = Context.from_env()
    assert (context.use_hyde, context.hyde_num_docs, context.hyde_chat_model) == (True, 3, "llama3")
    assert context.db_path == "/tmp/x.db" and context.openai_api_key == "sk-from-the-environment"
    assert context.embedding_provider == "voyage"
    assert Context.from_env(hyde_num_docs=4).hyde_num_docs == 4  # an explicit value wins
    assert Context() == Context(use_hyde=False, hyde_num_docs=2)  # pure: the environment is not read


def test_only_retrieval_from_env_reads_the_environment_below_the_apps(monkeypatch, tmp_path):
    """Retrieval() and a tool made without one were a trap: they read OPENAI_API_KEY, Context(...) did not."""
    from agent_retrieval import Retrieval, hyde, make_retrieval_tools

    monkeypatch.setenv("AGENT_RETRIEVAL_DB", str(tmp_path / "from-env.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    assert Retrieval.from_env().context.db_path == str(tmp_path / "from-env.db")
    assert Retrieval.from_env(db_path="given.db").context.db_path == "given.db"  # a given value wins
    for made in (Retrieval(), make_retrieval_tools()[0].retrieval):
        assert made.context == Context() and not made.context.openai_api_key
        made.close()
    # the query-embedding path's own fallback is the defaults too
    seen: list[Context] = []
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    monkeypatch.setattr(hyde, "make_embedder", lambda context, **_: seen.append(context) or embedder)
    assert hyde.get_query_embedding_for_retrieval("a question of several words here").hyde == "off"
    assert seen == [Context()]


@pytest.mark.parametrize(
    "where",
    [
        "make_retrieval_tools",
        "DocumentRetrieverTool",
        "AgentRetriever",
        "AgentRetrievalVectorStore",
        "ingest",
    ],
)
def test_a_context_where_a_retrieval_is_taken_is_refused_with_the_way_to_pass_it(where, tmp_path):
    import agent_retrieval
    from agent_retrieval import ingest_paths

    context = Context(db_path=str(tmp_path / "x.db"))
    make = {"ingest": lambda: ingest_paths([tmp_path], context)}.get(
        where, lambda: getattr(agent_retrieval, where)(context)
    )
    with pytest.raises(
        TypeError, match=r"expected a Retrieval, got Context \(a Context: Retrieval\(context\)\)"
    ):
        make()
    assert not (tmp_path / "x.db").exists()


def test_an_explicit_default_beats_the_environment(monkeypatch):
    """Reading the environment for "fields equal to their default" could not set a knob back to its
    default once the environment overrode it."""
    monkeypatch.setenv("AGENT_RETRIEVAL_CANDIDATES", "50")
    monkeypatch.setenv("AGENT_RETRIEVAL_USE_HYDE", "true")
    monkeypatch.setenv("AGENT_RETRIEVAL_FOLLOW_LINKS", "0")
    assert Context.from_env(candidates=100).candidates == 100
    context = Context.from_env(use_hyde=False, follow_links=4)
    assert (context.use_hyde, context.follow_links) == (False, 4)
    server = Context.from_env()  # a server run: the operator's environment, then the run's own choices
    run = server.with_run(RunSettings(candidates=100, use_hyde=False))
    assert (run.candidates, run.use_hyde, run.follow_links) == (100, False, 0)
    assert server.with_run(RunSettings()) == server  # a run that chose nothing keeps the operator's


def test_settings_are_frozen_and_building_one_changes_nothing_in_the_process(monkeypatch):
    from agent_retrieval.core import redaction

    monkeypatch.setattr(redaction, "_secrets", frozenset())
    context = Context(openai_api_key="sk-held-not-protected")
    assert redaction.redact("sk-held-not-protected") == "sk-held-not-protected"
    with pytest.raises(FrozenInstanceError):
        context.candidates = 5  # type: ignore[misc]


def test_a_bare_variable_of_earlier_releases_still_works_with_a_warning(monkeypatch):
    monkeypatch.setenv("CANDIDATES", "40")
    with pytest.warns(FutureWarning, match="CANDIDATES is deprecated: set AGENT_RETRIEVAL_CANDIDATES"):
        assert Context.from_env().candidates == 40
    monkeypatch.setenv("AGENT_RETRIEVAL_CANDIDATES", "60")  # ours wins over the bare one
    assert Context.from_env().candidates == 60


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("AGENT_RETRIEVAL_HYDE_NUM_DOCS", "two", "AGENT_RETRIEVAL_HYDE_NUM_DOCS='two' is not a valid int"),
        ("AGENT_RETRIEVAL_USE_HYDE", "maybe", "AGENT_RETRIEVAL_USE_HYDE='maybe' is not a valid bool"),
        ("AGENT_RETRIEVAL_HYDE_TEMPERATURE", "0.7", "hyde_temperature must be between 0 and 0.2"),
        ("AGENT_RETRIEVAL_EMBEDDING_PROVIDER", "cohere", "embedding_provider must be one of local, voyage"),
    ],
)
def test_bad_environment_values_name_the_setting_and_what_is_allowed(monkeypatch, env, value, message):
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Context.from_env()


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


def test_the_settings_reference_is_generated_from_the_settings_never_kept_by_hand():
    """docs/configuration.md holds `agent-retrieval config --markdown`: a setting added, renamed or described
    anew fails here until the page is generated again."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_markdown() in page
    for f in fields(Context):
        env = " or ".join(f"`{name}`" for name in _variables(f).split(" or "))
        default = f"`{f.default}`" if f.default != "" else "(unset)"
        assert f"| `{f.name}` | {env} | {default} | {f.metadata['description']} |" in page, f.name
