"""The Context: defaults, the environment read only by from_env, validation with readable errors, masked
secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_retrieval.context import (
    SECTIONS,
    SETTINGS,
    ChatSettings,
    Context,
    EmbeddingSettings,
    RunSettings,
    StoreSettings,
    settings_markdown,
)
from agent_retrieval.errors import ConfigError
from agent_retrieval.providers.embeddings import Embedder
from tests.conftest import WordHashEmbeddings


def test_defaults_match_the_hyde_seed():
    context = Context()
    assert (context.use_hyde, context.hyde_num_docs, context.hyde_skip_max_words) == (False, 2, 5)
    assert 30 <= context.resources.hyde_cache_ttl_seconds <= 60
    assert 0 <= context.hyde_temperature <= 0.2
    assert context.embeddings.embedding_provider == "local"
    assert context.store.db_path == "agent_retrieval.db"


def test_every_setting_has_a_description():
    assert all(f.description for f in SETTINGS.values())
    assert all(kind.__doc__ for kind in SECTIONS.values())


def test_from_env_reads_each_setting_not_given_and_context_reads_nothing(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_USE_HYDE", "true")
    monkeypatch.setenv("AGENT_RETRIEVAL_HYDE_NUM_DOCS", "3")
    monkeypatch.setenv("AGENT_RETRIEVAL_OPENAI_CHAT_MODEL", "llama3")
    monkeypatch.setenv("AGENT_RETRIEVAL_DB", "/tmp/x.db")
    monkeypatch.setenv("AGENT_RETRIEVAL_EMBEDDING_PROVIDER", "voyage")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    context = Context.from_env()
    assert (context.use_hyde, context.hyde_num_docs, context.chat.openai_chat_model) == (True, 3, "llama3")
    assert context.store.db_path == "/tmp/x.db"
    # one variable, every section that uses it
    assert context.chat.openai_api_key.get_secret_value() == "sk-from-the-environment"
    assert context.embeddings.openai_api_key == context.chat.openai_api_key
    assert context.embeddings.embedding_provider == "voyage"
    assert Context.from_env(hyde_num_docs=4).hyde_num_docs == 4  # an explicit value wins
    assert Context() == Context(use_hyde=False, hyde_num_docs=2)  # pure: the environment is not read


def test_only_retrieval_from_env_reads_the_environment_below_the_apps(monkeypatch, tmp_path):
    """Retrieval() and a tool made without one were a trap: they read OPENAI_API_KEY, Context(...) did not."""
    from agent_retrieval import Retrieval, hyde, make_retrieval_tools

    monkeypatch.setenv("AGENT_RETRIEVAL_DB", str(tmp_path / "from-env.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    assert Retrieval.from_env().context.store.db_path == str(tmp_path / "from-env.db")
    assert Retrieval.from_env(db_path="given.db").context.store.db_path == "given.db"  # a given value wins
    for made in (Retrieval(), make_retrieval_tools()[0].retrieval):
        assert made.context == Context() and not made.context.chat.openai_api_key
        made.close()
    # the query-embedding path's own fallback is the defaults too
    seen: list[EmbeddingSettings] = []
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    monkeypatch.setattr(hyde, "make_embedder", lambda settings, **_: seen.append(settings) or embedder)
    assert hyde.get_query_embedding_for_retrieval("a question of several words here").hyde == "off"
    assert seen == [EmbeddingSettings()]


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
    with pytest.raises(ValidationError, match="frozen"):
        context.candidates = 5  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        context.store.db_path = "elsewhere.db"  # type: ignore[misc]


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
    assert context.chat.configured


def test_the_settings_reference_is_generated_from_the_settings_never_kept_by_hand():
    """docs/configuration.md holds `agent-retrieval config --markdown`: a setting added, renamed or described
    anew fails here until the page is generated again."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_markdown() in page
    for section, kind in SECTIONS.items():
        assert f"## Deployment settings: `{section}`" in page
        for name in kind.model_fields:
            assert f"| `{name}` | " in page.split(f"`{section}`", 1)[1], (section, name)
    for name, f in RunSettings.model_fields.items():
        assert f"| `{name}` | `AGENT_RETRIEVAL_{name.upper()}` | `{f.default}` | {f.description} |" in page


def test_each_part_receives_its_own_section_and_a_store_never_sees_a_chat_key():
    """open_store takes a StoreSettings: a key that is not the store's is refused by name, not carried."""
    import inspect

    from agent_retrieval import make_embedder, open_store
    from agent_retrieval.providers.llm import make_chat_model

    assert inspect.signature(open_store).parameters["settings"].annotation == "StoreSettings"
    assert inspect.signature(make_embedder).parameters["settings"].annotation == "EmbeddingSettings"
    assert inspect.signature(make_chat_model).parameters["settings"].annotation == "ChatSettings"
    with pytest.raises(ConfigError, match=r"^unknown setting 'openai_api_key'; the settings are .*db_path"):
        StoreSettings(openai_api_key="sk-not-for-the-store")
    assert "openai_api_key" not in StoreSettings.model_fields
    assert (
        "supabase_key" not in ChatSettings.model_fields
        and "postgres_dsn" not in EmbeddingSettings.model_fields
    )


def test_a_setting_is_given_by_name_or_in_its_section_and_a_name_wins_over_the_section():
    store = StoreSettings(db_path="a.db", tenant_id="acme")
    context = Context(store=store, db_path="b.db", openai_api_key="sk-for-both-1234")
    assert (context.store.db_path, context.store.tenant_id) == ("b.db", "acme")
    assert context.chat.openai_api_key == context.embeddings.openai_api_key  # a shared name sets both
    assert Context(store=store).store is store
    moved = context.replace(db_path="c.db", candidates=7)  # dataclasses.replace, for settings
    assert (moved.store.db_path, moved.store.tenant_id, moved.candidates) == ("c.db", "acme", 7)
    with pytest.raises(ConfigError, match="rrf_k must be between 1 and 1000"):
        context.replace(rrf_k=0)  # validated as a new object


def test_secrets_are_secret_strings_and_an_empty_variable_of_a_number_counts_as_unset(monkeypatch):
    context = Context(postgres_dsn="postgresql://u:pw-secret@db/x", supabase_jwt_secret="jwt-secret-1")
    assert "pw-secret" not in repr(context) and "jwt-secret-1" not in repr(context)
    assert context.store.backend == "postgres" and context.store.backend_dsn.endswith("@db/x")
    assert sorted(context.secrets()) == ["jwt-secret-1", "postgresql://u:pw-secret@db/x"]
    monkeypatch.setenv("AGENT_RETRIEVAL_CANDIDATES", "")
    assert Context.from_env().candidates == 100


def test_a_removed_variable_is_named_with_what_replaced_it(monkeypatch):
    """AGENT_RETRIEVAL_HYDE_MODEL duplicated the chat model: a deployment still setting it is told."""
    monkeypatch.setenv("AGENT_RETRIEVAL_HYDE_MODEL", "llama3")
    with pytest.warns(FutureWarning, match="AGENT_RETRIEVAL_HYDE_MODEL is no longer read: HyDE uses"):
        assert Context.from_env().chat.openai_chat_model == "gpt-4o-mini"


def test_langgraph_studio_is_given_the_run_settings_alone_with_their_descriptions_and_bounds(retrieval):
    """The graphs' context_schema is RunSettings: Studio's form is its JSON schema, and a run's context is
    validated by it (a deployment setting in it is refused: test_settings_boundary)."""
    from agent_retrieval.graphs import rag
    from agent_retrieval.server.graph_parts import GraphParts

    schema = rag.build(GraphParts(retrieval=retrieval)).get_context_jsonschema()
    assert schema is not None and set(schema["properties"]) == set(RunSettings.model_fields)
    assert schema["properties"]["candidates"]["maximum"] == 1000
    assert all(p["description"] for p in schema["properties"].values())


def test_a_section_given_to_from_env_is_kept_whole(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_DB", "from-env.db")
    monkeypatch.setenv("AGENT_RETRIEVAL_TENANT", "from-env")
    monkeypatch.setenv("AGENT_RETRIEVAL_CHUNK_SIZE", "500")
    context = Context.from_env(store=StoreSettings(db_path="given.db"))
    assert (context.store.db_path, context.store.tenant_id) == ("given.db", "")
    assert context.ingest.chunk_size == 500  # the other sections are read as ever


def test_every_sections_secrets_are_masked_even_when_two_hold_different_keys_of_one_name():
    """A chat key apart from the embeddings key (an Ollama chat, OpenAI embeddings): both are secrets."""
    context = Context(
        chat=ChatSettings(openai_api_key="sk-chat-key-1234"),
        embeddings=EmbeddingSettings(openai_api_key="sk-embedding-key-5678"),
    )
    assert sorted(context.secrets()) == ["sk-chat-key-1234", "sk-embedding-key-5678"]


def test_a_deployment_setting_read_from_the_context_says_which_section_holds_it():
    """0.2's `context.db_path` now lives in `context.store`: the error says so instead of 'no attribute'."""
    with pytest.raises(AttributeError, match=r"^db_path is a store setting: read context\.store\.db_path$"):
        Context().db_path  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing_of_the_kind'"):
        Context().nothing_of_the_kind  # type: ignore[attr-defined]  # noqa: B018
