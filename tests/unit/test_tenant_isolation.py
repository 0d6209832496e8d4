"""Tenants on the embedded store: one tenant's tools never reach another's rows, by any query, filter,
document id or tenant name. (Postgres and Supabase: tests/integration/test_postgres_store.py and
test_supabase_store.py, where the scope is a condition of every SQL function and of row-level security.)"""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolMessage

from agent_retrieval.context import Context
from agent_retrieval.errors import ConfigError
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import open_store, sqlite_path
from agent_retrieval.tools import make_retrieval_tools

SECRETS = {"acme": "BLUEHERON", "globex": "REDFALCON"}


def tenant_docs(tenant: str) -> list[Document]:
    secret = SECRETS[tenant]
    return [
        Document(
            f"{tenant}-plan",
            f"{tenant} acquisition plan",
            f"The {tenant} acquisition plan is codenamed {secret}. Closing is planned for spring.",
            {"owner": tenant, "category": "strategy"},
        ),
        Document(
            "shared-id",
            "Board minutes",
            f"Minutes of the {tenant} board: the plan {secret} is approved.",
            {"owner": tenant},
        ),
    ]


@pytest.fixture
def as_tenant(tmp_path, embedder):
    """Tools for a tenant (None: no tenant) over one db_path, after each tenant has ingested its documents."""
    opened: list[Retrieval] = []

    def tools(tenant: str | None):
        retrieval = Retrieval(
            Context(db_path=str(tmp_path / "store.db"), tenant_id=tenant or ""), embedder=embedder
        )
        opened.append(retrieval)
        return make_retrieval_tools(
            retrieval=retrieval,
            names=["document_retriever", "chunk_retriever", "similarity_search", "index_document"],
        )

    for tenant in SECRETS:
        retrieval = tools(tenant)[0].retrieval
        ingest(tenant_docs(tenant), retrieval.store, embedder, retrieval.context, progress=False)
    yield tools
    for retrieval in opened:
        retrieval.close()


def call(tool, **args) -> ToolMessage:
    return tool.invoke({"type": "tool_call", "id": "1", "name": tool.name, "args": args})


def everything_readable(tools) -> str:
    """All a tenant's tools return (hits, and error messages) for queries, filters and id guesses aimed at
    every tenant's rows. The query itself names both secrets, so only what came back is searched."""
    documents, chunks, similar, _ = tools
    query = "acquisition plan codenamed BLUEHERON REDFALCON board minutes"
    messages = [
        call(documents, query=query, top_k=50),
        call(chunks, query=query, top_k=50),
        call(similar, query=query, k=50),
        call(documents, query=query, filters={"owner": ["acme", "globex"]}),
        call(chunks, query=query, document_ids=["shared-id"]),
        call(chunks, query=query, document_ids=["acme-plan", "globex-plan"]),
        call(chunks, query="plan", query_type="summarize", document_ids=["shared-id"]),
    ]
    returned = [
        str(m.artifact["hits"]) if m.status == "success" else m.content.replace(query, "") for m in messages
    ]
    return "\n".join(returned)


@pytest.mark.parametrize("tenant", sorted(SECRETS))
def test_a_tenant_reads_only_its_own_rows_through_every_tool(as_tenant, tenant):
    text = everything_readable(as_tenant(tenant))
    other = next(t for t in SECRETS if t != tenant)
    assert SECRETS[tenant] in text
    assert SECRETS[other] not in text and f"'{other}'" not in text  # neither its text nor its metadata


def test_the_same_document_id_in_two_tenants_is_two_documents(as_tenant):
    for tenant, secret in SECRETS.items():
        _, chunks, _, _ = as_tenant(tenant)
        message = call(chunks, query="board minutes", document_ids=["shared-id"])
        assert [h["document_id"] for h in message.artifact["hits"]] == ["shared-id"]
        assert secret in message.content


def test_a_tenant_writes_only_to_its_own_rows(as_tenant):
    *_, index_document = as_tenant("acme")
    assert (
        call(index_document, id="note", title="Note", content="GREENOWL is acme's new code.").status
        == "success"
    )
    documents, *_ = as_tenant("globex")
    assert "GREENOWL" not in str(call(documents, query="GREENOWL new code").artifact["hits"])
    documents, *_ = as_tenant("acme")
    assert "GREENOWL" in str(call(documents, query="GREENOWL new code").artifact["hits"])


def test_without_a_tenant_the_tenants_files_are_not_read(as_tenant):
    text = everything_readable(as_tenant(None))
    assert all(secret not in text for secret in SECRETS.values())


@pytest.mark.parametrize(
    "tenant", ["../globex", "acme/../globex", ".", "..", "/etc/passwd", "C:\\x", "ümlaut tenant", "a" * 60]
)
def test_any_tenant_id_names_one_file_inside_the_tenants_folder(tmp_path, tenant):
    path = sqlite_path(Context(db_path=str(tmp_path / "store.db"), tenant_id=tenant).store)
    assert path.parent == tmp_path / "store.tenants"
    assert path.name not in (".db", "..db") and "/" not in path.name and "\x00" not in path.name
    others = {
        sqlite_path(Context(db_path=str(tmp_path / "store.db"), tenant_id=t).store)
        for t in ("globex", "acme")
    }
    assert path not in others


@pytest.mark.parametrize("tenant", ["a\x00b", "acme\nglobex", "a\ud800b"])
def test_a_tenant_id_that_is_not_one_line_of_text_is_refused_by_name(tmp_path, tenant):
    with pytest.raises(ConfigError, match=r"^tenant_id must be"):
        Context(db_path=str(tmp_path / "store.db"), tenant_id=tenant)


def test_a_tenant_id_too_long_for_a_file_name_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="tenant_id is too long"):
        sqlite_path(Context(db_path=str(tmp_path / "store.db"), tenant_id="é" * 100).store)


def test_tenants_differing_only_in_letter_case_never_share_a_file(tmp_path):
    """On a file system that folds case (macOS, Windows), ACME.db and acme.db are one file."""
    settings = {"db_path": str(tmp_path / "store.db")}
    with open_store(Context(**settings, tenant_id="acme").store):
        pass
    with pytest.raises(
        ConfigError, match=r"'ACME' differs only in letter case from the tenant stored in acme\.db"
    ):
        sqlite_path(Context(**settings, tenant_id="ACME").store)
    assert (
        sqlite_path(Context(**settings, tenant_id="acme").store).name == "acme.db"
    )  # the first one keeps its file
