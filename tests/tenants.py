"""Three tenants in front of a server under test: acme and globex each keep a secret codename, and the press
has published its plan to everyone. Each user must find their own tenant's plan and the public one, never
the other tenant's."""

from __future__ import annotations

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.stores import open_store
from agent_retrieval.stores.postgres import PostgresStore
from tests.fakeapi import FakeAPI
from tests.stack import SupabaseStack

SCHEMA = "ar_server"  # served by the session's PostgREST (tests/conftest.py SUPABASE_SCHEMAS)
DIM = 64
SECRETS = {"acme": "BLUEHERON", "globex": "REDFALCON", "press": "OPENDOOR"}


def tenant_document(tenant: str) -> Document:
    return Document(
        f"{tenant}-plan",
        f"{tenant} acquisition plan",
        f"# Acquisition plan\n\nThe {tenant} acquisition plan is codenamed {SECRETS[tenant]}. "
        "Closing is planned for the spring, after the board approves the codename.",
    )


def seed_tenants(stack: SupabaseStack, api: FakeAPI, key: str) -> None:
    """A fresh SCHEMA holding each tenant's plan, written with the service role as an operator ingests,
    embedded through the local OpenAI-speaking API with `key`; the press's published."""
    stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    PostgresStore(stack.postgres.dsn, schema=SCHEMA).init(DIM)
    stack.postgrest.reload_schema()
    for tenant in SECRETS:
        context = Context(
            supabase_url=stack.url,
            supabase_key=stack.service_key,
            db_schema=SCHEMA,
            tenant_id=tenant,
            embedding_provider="openai",
            openai_base_url=api.openai_url,
            openai_api_key=key,
        )
        with open_store(context.store) as store:
            report = ingest(
                [tenant_document(tenant)],
                store,
                make_embedder(context.embeddings),
                context,
                progress=False,
                public=tenant == "press",
            )
        assert report.written == 1 and report.unembedded == 0


def server_settings(stack: SupabaseStack, api: FakeAPI, key: str) -> dict[str, str]:
    """A server's environment in front of the seeded SCHEMA: the anon key (users bring their tokens), the
    secret their tokens are checked with, and embeddings through the local API with `key`."""
    return {
        "SUPABASE_URL": stack.url,
        "SUPABASE_KEY": stack.anon_key,
        "AGENT_RETRIEVAL_SCHEMA": SCHEMA,
        "SUPABASE_JWT_SECRET": stack.jwt_secret,
        "AGENT_RETRIEVAL_EMBEDDING_PROVIDER": "openai",
        "OPENAI_BASE_URL": api.openai_url,
        "OPENAI_API_KEY": key,
    }
