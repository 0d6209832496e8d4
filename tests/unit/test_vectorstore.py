"""AgentRetrievalVectorStore's way in: a Retrieval, and LangChain's `embedding=` in its embedder's place."""

from __future__ import annotations

from agent_retrieval import AgentRetrievalVectorStore, Context, Retrieval
from tests.conftest import WordHashEmbeddings


def test_an_embedding_takes_the_embedders_place_over_the_given_retrievals_settings(tmp_path):
    given = Retrieval(Context(db_path=str(tmp_path / "given.db"), chunk_size=500, chunk_overlap=50))
    store = AgentRetrievalVectorStore.from_texts(
        ["Quokkas live on Rottnest Island.", "Kea are alpine parrots."], WordHashEmbeddings(), retrieval=given
    )
    assert store.retrieval is not given and store.retrieval.context == given.context
    assert store.retrieval.embedder.model_id == "langchain/WordHashEmbeddings"
    assert [d.page_content for d in store.similarity_search("quokkas island", k=1)] == [
        "Quokkas live on Rottnest Island."
    ]
    store.close()  # its own Retrieval; the given one is the caller's and still opens its store
    assert given.store.stats().documents == 2
    given.close()


def test_a_given_retrieval_is_used_as_it_is_and_left_open(tmp_path):
    given = Retrieval(Context(db_path=str(tmp_path / "s.db")))
    opened = given.store
    store = AgentRetrievalVectorStore(given, level="chunks")
    assert store.retrieval is given
    store.close()
    assert given.store is opened  # not closed and dropped: the caller's Retrieval is untouched
