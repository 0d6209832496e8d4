"""benchmarks/supabase_peer.py: the guide's hybrid search, made beside a small store of ours, behaves as the
guide describes it (full text requires every word; vectors always answer; fused by reciprocal rank)."""

from __future__ import annotations

import numpy as np

from agent_retrieval.models import Document
from agent_retrieval.stores.postgres import PostgresStore
from tests.benchmarks import load_script

DIM = 4


def axis(n: int) -> np.ndarray:
    return np.eye(DIM, dtype=np.float32)[n]


def test_the_guides_hybrid_search_runs_beside_our_store(postgres):
    peer = load_script("supabase_peer")
    ours = PostgresStore(postgres.dsn, schema="peer_smoke_ours")
    ours.init(DIM)
    texts = {
        "deposit": "The tenancy deposit is protected within thirty days.",
        "boiler": "Boilers are repaired within four hours in winter.",
        "gifts": "Gifts worth more than fifty pounds are declined.",
    }
    documents = [
        Document(doc_id, doc_id.title(), text, content_hash=doc_id, text_hash=doc_id, embedding=axis(n))
        for n, (doc_id, text) in enumerate(texts.items())
    ]
    ours.upsert(documents, [], "test/axes")
    with postgres.connect() as conn:
        peer.load_peer(conn, "peer_smoke_ours", "peer_smoke_guide", DIM)
        peer.load_peer(conn, "peer_smoke_ours", "peer_smoke_guide", DIM)  # once: a rerun adds nothing

        def search(text: str, vector: np.ndarray) -> list[str]:
            sql = "select doc_id from peer_smoke_guide.hybrid_search(%s, %s::vector, %s)"
            return [r[0] for r in conn.execute(sql, (text, vector.tolist(), 2)).fetchall()]

        assert conn.execute("select count(*) from peer_smoke_guide.documents").fetchone()[0] == 3
        # both sides agree on "boiler": it comes first
        assert search("boilers repaired in winter", axis(1))[0] == "boiler"
        # full text needs every word ("tenancy" is in no boiler text), so the vector side decides
        assert search("tenancy boilers", axis(2))[0] == "gifts"
    ours.close()
