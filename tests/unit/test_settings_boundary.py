"""Who may set what: a run sets run settings only, endpoints and keys come from one place, keys are clean,
and the identity a server run works as comes from its authenticated user."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from langgraph_sdk.auth.types import StudioUser

from agent_retrieval import hyde
from agent_retrieval.context import DEPLOYMENT_SETTINGS, RUN_SETTINGS, SETTINGS, Context, RunSettings
from agent_retrieval.errors import ConfigError
from agent_retrieval.graphs import rag
from agent_retrieval.planning import READING_ON
from agent_retrieval.providers.llm import make_chat_model
from agent_retrieval.server.auth import deployment_for, refused_settings
from agent_retrieval.server.graph_parts import GraphParts
from tests.conftest import CountingChatModel
from tests.fakeapi import FakeAPI

QUESTION = "Which fees must an estate agent disclose to the client in writing?"


@pytest.mark.parametrize("name", DEPLOYMENT_SETTINGS)
def test_a_run_may_not_set_any_deployment_setting(name):
    with pytest.raises(ConfigError, match=rf"^{name} is a deployment setting: a run may set only use_hyde, "):
        RunSettings(**{name: SETTINGS[name].default or "x"})


def test_settings_are_split_once_and_completely():
    assert set(RUN_SETTINGS) | set(DEPLOYMENT_SETTINGS) == set(SETTINGS)
    assert not set(RUN_SETTINGS) & set(DEPLOYMENT_SETTINGS)
    assert not {
        "db_path",
        "tenant_id",
        "openai_base_url",
        "openai_api_key",
        "postgres_dsn",
        "supabase_key",
        "supabase_user_token",
        "db_schema",
        "local_embedding_model",
    } & set(RUN_SETTINGS)


async def test_a_run_context_sets_knobs_and_a_deployment_field_in_it_is_refused(retrieval, monkeypatch):
    graph = rag.build(GraphParts(retrieval=retrieval))
    out = await graph.ainvoke({"messages": [("user", QUESTION)]}, context={"answer_chunks": 2})
    assert len([h for h in out["hits"] if h["queries"] != [READING_ON]]) == 2  # reading on adds others
    with pytest.raises(ConfigError, match=r"^db_path is a deployment setting"):
        await graph.ainvoke({"messages": [("user", QUESTION)]}, context={"db_path": "/etc/other.db"})


def test_an_unknown_setting_names_what_exists():
    with pytest.raises(ConfigError, match=r"unknown setting 'use_hide'; the settings are .*use_hyde"):
        Context(use_hide=True)


def test_a_key_from_the_environment_is_never_sent_to_an_endpoint_set_in_code(monkeypatch):
    """The run-context attack in miniature: the server's key must not follow a base URL set elsewhere."""
    with FakeAPI() as server_api, FakeAPI() as other:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-server-key-1234")
        monkeypatch.setenv("OPENAI_BASE_URL", server_api.openai_url)
        make_chat_model(Context.from_env().chat).invoke("hello")
        make_chat_model(Context.from_env(openai_base_url=other.openai_url).chat).invoke("hello")
        assert [r.headers["authorization"] for r in server_api.requests_to("chat/completions")] == [
            "Bearer sk-server-key-1234"
        ]
        assert "sk-server-key-1234" not in str(other.requests_to("chat/completions"))
    # and the other way round: a key set in code does not go to the environment's endpoint
    assert Context.from_env(openai_api_key="sk-code-key-5678").chat.openai_base_url == ""


def test_keys_read_from_a_file_lose_their_newline_and_a_broken_key_is_refused_without_showing_it(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-a-file-1234\n")
    assert Context.from_env().chat.openai_api_key.get_secret_value() == "sk-from-a-file-1234"
    monkeypatch.setenv("AGENT_RETRIEVAL_SUPABASE_USER_TOKEN", "eyJhbGci.eyJzdWIi\n.sig")
    with pytest.raises(ConfigError) as error:
        Context.from_env()
    assert "supabase_user_token" in str(error.value) and "eyJ" not in str(error.value)


def test_settings_that_are_not_utf8_or_hold_control_characters_are_refused_by_name(monkeypatch):
    script = (
        "from agent_retrieval.context import Context\n"
        "from agent_retrieval.errors import ConfigError\n"
        "try:\n    Context.from_env()\nexcept ConfigError as e:\n    print(e)\n"
    )
    env = {**os.environ, "AGENT_RETRIEVAL_TENANT": "acme"}
    env_bytes = {k.encode(): v.encode() for k, v in env.items()} | {b"AGENT_RETRIEVAL_TENANT": b"acm\xe9"}
    out = subprocess.run([sys.executable, "-c", script], env=env_bytes, capture_output=True, text=True)
    assert out.stdout.startswith("AGENT_RETRIEVAL_TENANT is not valid UTF-8 text"), out.stderr
    with pytest.raises(ConfigError, match="tenant_id must be one line of text"):
        Context(tenant_id="acme\nglobex")
    with pytest.raises(ConfigError, match="openai_base_url must be an http"):
        Context(openai_base_url="file:///etc/passwd")


# --- who a server run is --------------------------------------------------------------------------------


def test_a_verified_user_searches_in_their_tenant_with_their_token(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_TENANT", "operator-tenant")
    user = {"identity": "u1", "tenant": "acme", "supabase_token": "eyJ.user.token"}
    settings = deployment_for(user)
    assert (settings.store.tenant_id, settings.store.supabase_user_token.get_secret_value()) == (
        "acme",
        "eyJ.user.token",
    )
    studio = StudioUser("langgraph-studio-user")  # one that LangSmith authenticated, on a deployment
    assert deployment_for(studio).store.tenant_id == "operator-tenant"
    monkeypatch.setenv(
        "LANGSMITH_LANGGRAPH_API_VARIANT", "local_dev"
    )  # langgraph dev: anyone sends its header
    with pytest.raises(ConfigError, match="carries no tenant"):
        deployment_for(studio)
    with pytest.raises(ConfigError, match="carries no tenant"):
        deployment_for(None)  # a run on a server with no user is nobody's, not the operator's
    with pytest.raises(ConfigError, match="carries no tenant"):
        deployment_for({"identity": "someone"})  # another auth handler's user, with no tenant: refused


def test_deployment_settings_are_found_in_a_runs_context_configurable_and_an_assistants_context():
    assert refused_settings({"kwargs": {"context": {"openai_base_url": "http://x", "top": 1}}}) == [
        "openai_base_url"
    ]
    assert refused_settings({"kwargs": {"config": {"configurable": {"db_path": "x", "thread_id": "t"}}}}) == [
        "db_path"
    ]
    assert refused_settings(
        {"context": {"tenant_id": "t2"}, "config": {"configurable": {"answer_chunks": 2}}}
    ) == ["tenant_id"]
    assert refused_settings({"kwargs": {"context": {"answer_chunks": 2, "use_hyde": True}}}) == []


# --- the HyDE cache: shared within a tenant and an endpoint only --------------------------------------------

LONG = "What must an estate agent tell a seller about payments received from third parties?"


def _vector(context: Context, embedder, chat) -> hyde.QueryEmbedding:
    return hyde.get_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=chat)


def test_the_hyde_cache_is_not_shared_across_tenants_users_or_endpoints(embedder):
    chat = CountingChatModel(responses=["A passage.\n\nAnother passage."])
    assert not _vector(Context(use_hyde=True, tenant_id="acme"), embedder, chat).cached
    assert _vector(Context(use_hyde=True, tenant_id="acme"), embedder, chat).cached
    assert not _vector(Context(use_hyde=True, tenant_id="globex"), embedder, chat).cached
    assert not _vector(Context(use_hyde=True, supabase_user_token="eyJ.other.user"), embedder, chat).cached
    assert chat.calls == 3


def test_the_hyde_cache_is_not_shared_across_chat_or_embedding_endpoints(embedder):
    with FakeAPI() as api:
        first = Context(use_hyde=True, openai_base_url=api.openai_url, openai_api_key="sk-one-12345678")
        other_key = Context(use_hyde=True, openai_base_url=api.openai_url, openai_api_key="sk-two-12345678")
        llm_one, llm_two = hyde.hyde_chat_model(first), hyde.hyde_chat_model(other_key)
        assert not _vector(first, embedder, llm_one).cached
        assert _vector(first, embedder, llm_one).cached
        assert not _vector(other_key, embedder, llm_two).cached
        assert len(api.requests_to("chat/completions")) == 2
    elsewhere = type(embedder)(embedder.embeddings, embedder.model_id, endpoint="http://elsewhere|key")
    raw = Context(use_hyde=False)
    assert not hyde.get_query_embedding_for_retrieval(LONG, raw, embedder=embedder).cached
    assert not hyde.get_query_embedding_for_retrieval(LONG, raw, embedder=elsewhere).cached


def test_a_run_cannot_ask_for_a_summary_larger_than_a_tool_message_should_carry():
    """summarize_max_chunks=10,000 from a run's context made a 1.6 MB tool message."""
    with pytest.raises(ConfigError, match="summarize_max_chunks must be between 1 and 300"):
        RunSettings(summarize_max_chunks=10_000)
