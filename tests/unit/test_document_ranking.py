"""document_retriever ranks a document by what it says anywhere (search/documents.py), not by its opening."""

from __future__ import annotations

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document, SearchRequest
from agent_retrieval.search.retrieval import Retrieval

# A reference page whose opening is about something else and whose answer is one entry among many, beside
# a short page sharing some of the question's words: the shape of Sphinx's configuration page and its
# coverage extension's page in the documentation-set benchmark.
FILLER = [
    "project author copyright release version language",
    "theme sidebar logo favicon stylesheet colours",
    "latex paper size preamble fonts margins",
    "manual pages section authors description",
    "epub cover publisher identifier scheme",
    "texinfo menu entries category footnotes",
    "linkcheck timeout retries anchors workers",
    "intersphinx mapping inventory cache limit",
]
REFERENCE = Document(
    id="configuration",
    title="Settings reference",
    content="\n\n".join(
        [
            "This page lists every value the configuration file may set. "
            + " ".join(f"The {words} values are described below." for words in FILLER),
            *(f"## {words.split()[0]}\n\n" + f"Sets the {words}. " * 12 for words in FILLER),
            "## exclude_patterns\n\nPatterns of source files to skip when building the documentation.",
            *(f"## {words.split()[-1]}\n\n" + f"Controls the {words}. " * 12 for words in FILLER),
        ]
    ),
)
NEIGHBOUR = Document(
    id="coverage",
    title="Coverage builder",
    content="The coverage builder counts undocumented objects and can skip some of them in source files.",
)


@pytest.mark.parametrize("level", ["documents", "chunks"])
def test_a_document_is_found_by_a_later_section_before_a_neighbour_sharing_some_words(
    tmp_path, embedder, level
):
    context = Context(db_path=str(tmp_path / "store.db"))
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest([REFERENCE, NEIGHBOUR], retrieval.store, embedder, context, progress=False)
        request = SearchRequest(query="skip source files when building the documentation", top_k=2)
        hits = retrieval.search(request, level).hits
    assert [hit.document_id for hit in hits] == ["configuration", "coverage"]
    if level == "documents":  # the document shows the passage it was found by, not its opening
        assert hits[0].id == "configuration" and "exclude_patterns" in (hits[0].heading_path or "")
        assert hits[0].content.startswith("Patterns of source files")
