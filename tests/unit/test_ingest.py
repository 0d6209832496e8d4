"""Ingestion: loaders, chunking, embedding only what changed, failures that lose nothing, re-embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest
from agent_retrieval.ingest import (
    IngestReport,
    chunk_document,
    chunk_text,
    document_text,
    embed_rows,
    ingest,
    reembed,
)
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import SQLiteStore
from tests.conftest import WordHashEmbeddings

POLICY = """---
title: "Commission Disclosure Policy"
category: policy
year: 2023
---
# Commission Disclosure Policy

## Scope
This policy applies to every negotiator of Halden & Rowe Estates.

## Disclosure
### Third-party payments
Negotiators must provide the vendor with written disclosure of any commission, referral fee or other
remuneration received from a third party.
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "policies").mkdir(parents=True)
    (root / "policies" / "commission.md").write_text(POLICY, encoding="utf-8")
    (root / "notes.txt").write_text(
        "Keys for 14 Banda Lane are kept in the front office safe.", encoding="utf-8"
    )
    (root / "page.html").write_text(
        "<html><head><title>Repairs</title><style>p{}</style></head><body><h1>Repairs</h1>"
        "<p>Report a leak within 24 hours.</p><script>alert(1)</script><h2>Emergencies</h2>"
        "<p>Call the out-of-hours line.</p></body></html>",
        encoding="utf-8",
    )
    (root / "records.jsonl").write_text(
        json.dumps(
            {
                "id": "r1",
                "title": "Record one",
                "text": "Gas safety certificate renewed.",
                "metadata": {"year": 2022},
            }
        )
        + "\n\n"
        + json.dumps({"_id": 7, "text": "Smoke alarms tested."})
        + "\n",
        encoding="utf-8",
    )
    (root / "ignored.bin").write_bytes(b"\x00\x01")
    return root


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    with SQLiteStore(tmp_path / "ingest.db") as store:
        yield store


def test_loaders_read_every_supported_format(folder: Path):
    docs = {d.id: d for d in load_documents([folder])}
    assert set(docs) == {"policies/commission", "notes", "page", "r1", "7"}
    policy = docs["policies/commission"]
    assert policy.title == "Commission Disclosure Policy"
    assert policy.metadata == {"category": "policy", "year": 2023}
    assert not policy.content.startswith("---")
    page = docs["page"]
    assert page.title == "Repairs" and "alert" not in page.content and "p{}" not in page.content
    assert "## Emergencies" in page.content
    assert docs["r1"].metadata == {"year": 2022} and docs["7"].title == "7"
    assert docs["notes"].title == "notes"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "records.jsonl:2: not valid JSON"),
        ('{"id": "x"}', "records.jsonl:2: needs a non-empty 'id' and a string 'text'"),
        ('["a"]', "records.jsonl:2: each line must be a JSON object"),
    ],
)
def test_bad_jsonl_names_the_file_and_line(tmp_path: Path, line: str, message: str):
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "ok", "text": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=message):
        list(load_documents([path]))


def test_missing_paths_and_unsupported_files_are_clear_errors(tmp_path: Path):
    with pytest.raises(InvalidRequest, match="no such file or folder"):
        list(load_documents([tmp_path / "absent"]))
    (tmp_path / "x.pdfx").write_text("x")
    with pytest.raises(InvalidRequest, match=r"unsupported file type \.pdfx"):
        list(load_documents([tmp_path / "x.pdfx"]))
    (tmp_path / "bad.md").write_text("---\ntitle: [unclosed\n---\nbody")
    with pytest.raises(InvalidRequest, match="front matter is not valid YAML"):
        list(load_documents([tmp_path / "bad.md"]))


def test_chunks_carry_their_heading_path_and_the_documents_metadata(folder: Path):
    policy = next(d for d in load_documents([folder]) if d.id == "policies/commission")
    chunks = chunk_document(policy, chunk_size=200, chunk_overlap=20)
    paths = [c.heading_path for c in chunks]
    assert paths[0] == "Commission Disclosure Policy > Scope"
    assert "Commission Disclosure Policy > Disclosure > Third-party payments" in paths
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(len(c.content) <= 200 and c.metadata == policy.metadata for c in chunks)
    assert chunk_text(chunks[0]).startswith("Commission Disclosure Policy > Scope\n\n")
    assert document_text(policy).startswith("Commission Disclosure Policy\n\n")


def test_chunks_keep_code_indentation_and_paragraphs_and_split_between_paragraphs():
    content = (
        "# Guide\n\nFirst paragraph, one line\nwrapped onto a second.\n\nSecond paragraph.\n\n"
        "## Code ##\n\n```python\n# a comment, not a heading\ndef area(r):\n    return 3.14 * r * r\n```\n\n"
        "- a list\n    - nested under it\n\n"
        + "\n\n".join(f"Paragraph {n} of the long part, a sentence or two long." for n in range(12))
    )
    chunks = chunk_document(Document(id="g", title="Guide", content=content), chunk_size=200, chunk_overlap=0)
    assert chunks[0].content == "First paragraph, one line\nwrapped onto a second.\n\nSecond paragraph."
    code = chunks[1]
    assert code.heading_path == "Guide > Code"
    assert (
        "def area(r):\n    return 3.14 * r * r" in code.content and "- a list\n    - nested" in code.content
    )
    rest = [c.content for c in chunks if c.content.startswith("Paragraph")]
    assert rest and all(c.endswith("long.") for c in rest)  # cut between paragraphs, never inside one


def test_rerunning_on_unchanged_input_embeds_nothing(folder: Path, store: SQLiteStore):
    embeddings = WordHashEmbeddings()
    embedder = Embedder(embeddings, "test/word-hash")
    first = ingest(load_documents([folder]), store, embedder, progress=False)
    assert (first.written, first.unchanged) == (5, 0) and first.embedded > 0
    calls = embeddings.documents_embedded
    second = ingest(load_documents([folder]), store, embedder, progress=False)
    assert (second.written, second.unchanged, second.embedded) == (0, 5, 0)
    assert embeddings.documents_embedded == calls


def test_a_changed_document_re_embeds_only_its_changed_texts(folder: Path, store: SQLiteStore):
    embeddings = WordHashEmbeddings()
    embedder = Embedder(embeddings, "test/word-hash")
    ingest(load_documents([folder]), store, embedder, progress=False)
    before = embeddings.documents_embedded
    (folder / "policies" / "commission.md").write_text(POLICY.replace("every negotiator", "each negotiator"))
    report = ingest(load_documents([folder]), store, embedder, progress=False)
    assert (report.written, report.unchanged) == (1, 4)
    # the document's lead and the Scope chunk changed; the Disclosure chunk's vector is reused
    assert embeddings.documents_embedded - before == report.embedded == 2
    assert report.reused >= 1
    hits = store.keyword_search("chunks", "each negotiator", 5)
    assert hits and "each negotiator" in hits[0].content


def test_a_failing_embedder_stores_rows_unembedded_and_reembed_fills_them(folder: Path, store: SQLiteStore):
    broken = WordHashEmbeddings(fail=True)
    embedder = Embedder(broken, "test/word-hash")
    report = ingest(load_documents([folder]), store, embedder, progress=False)
    assert report.written == 5 and report.unembedded > 0 and report.errors
    stats = store.stats()
    assert stats.documents == 5 and stats.documents_missing_embeddings == 5
    assert store.keyword_search("chunks", "leak", 5)  # nothing is lost: keyword search finds them already
    broken.fail = False
    again = reembed(store, embedder, progress=False)
    assert again.embedded > 0
    stats = store.stats()
    assert (stats.documents_missing_embeddings, stats.chunks_missing_embeddings) == (0, 0)
    assert stats.embedding_model == "test/word-hash"
    assert ingest(load_documents([folder]), store, embedder, progress=False).embedded == 0


def test_a_new_model_is_refused_until_reembed_switches_the_store(folder: Path, store: SQLiteStore):
    ingest(load_documents([folder]), store, Embedder(WordHashEmbeddings(), "test/word-hash"), progress=False)
    bigger = Embedder(WordHashEmbeddings(size=64), "test/word-hash-64")
    with pytest.raises(EmbeddingModelMismatch, match="agent-retrieval reembed"):
        ingest(load_documents([folder]), store, bigger, progress=False)
    report = reembed(store, bigger, progress=False)
    assert report.embedded > 0
    assert store.embedding_model() == ("test/word-hash-64", 64)
    assert ingest(load_documents([folder]), store, bigger, progress=False).embedded == 0


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (
            Document("nul", "NUL", "a text file with a stray \x00 byte"),
            "content: must not contain NUL characters",
        ),
        (Document("i" * 513, "Long id", "text"), "document id: must be at most 512 characters"),
        (Document("i" * 511, "Long chunk ids", "text"), "chunk id: must be at most 512 characters"),
    ],
    ids=["nul", "long id", "long chunk id"],
)
def test_a_document_the_store_cannot_hold_is_skipped_with_a_note_and_the_rest_is_ingested(
    store: SQLiteStore, bad: Document, reason: str
):
    # The store refuses it with its own rule (Postgres holds no NUL; no search could name such an id), the
    # same on every backend; one such file must not stop an ingest.
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    report = ingest([bad, Document("good", "Good", "deposit")], store, embedder, progress=False)
    assert report.written == 1 and store.unknown_documents(["good"]) == []
    assert len(report.errors) == 1 and "skipped" in report.errors[0] and reason in report.errors[0]


def test_ingest_and_reembed_reuse_stored_vectors_the_same_way(store: SQLiteStore):
    # One function (embed_rows) reuses vectors for both: a text embedded once is never embedded again.
    embeddings = WordHashEmbeddings()
    embedder = Embedder(embeddings, "test/word-hash")
    ingest([Document("a", "A", "deposit text")], store, embedder, progress=False)
    calls = embeddings.documents_embedded
    report = ingest([Document("b", "A", "deposit text")], store, embedder, progress=False)
    assert (report.embedded, report.reused, embeddings.documents_embedded) == (0, 2, calls)
    store.set_embeddings("chunks", store.pending_embeddings("chunks", "test/word-hash", 10), "other")
    report = reembed(store, embedder, progress=False)
    assert report.embedded == 0 and embeddings.documents_embedded == calls


def test_duplicate_ids_keep_the_last_version(store: SQLiteStore):
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    docs = [Document("a", "A", "first text"), Document("a", "A", "second text")]
    report = ingest(docs, store, embedder, progress=False)
    assert report.documents == 1
    assert store.document_chunks(["a"], 5)[0].content == "second text"


def write_pdf(path: Path, pages: list[str], title: str = "") -> None:
    """A minimal PDF with one line of Helvetica text per page, offsets computed as the format requires."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    info = len(objects) + 1
    objects.append(f"<< /Title ({title}) >>")
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    path.write_bytes(out)


def test_pdf_text_is_loaded_page_after_page(tmp_path: Path):
    write_pdf(
        tmp_path / "survey-terms.pdf",
        ["Survey fees are due on instruction.", "Refunds within 14 days."],
        title="Survey Terms",
    )
    (doc,) = load_documents([tmp_path / "survey-terms.pdf"])
    assert (doc.id, doc.title, doc.metadata) == ("survey-terms", "Survey Terms", {"pages": 2})
    assert doc.content.index("Survey fees") < doc.content.index("Refunds within 14 days")
    write_pdf(tmp_path / "blank.pdf", [""])
    with pytest.raises(InvalidRequest, match="no text layer"):
        list(load_documents([tmp_path / "blank.pdf"]))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(InvalidRequest, match="not a readable PDF"):
        list(load_documents([tmp_path / "broken.pdf"]))


def test_ingest_paths_loads_what_it_can_and_lists_the_rest(tmp_path, folder, monkeypatch):
    from agent_retrieval import Context, Retrieval

    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/word-hash"),
    )
    (folder / "diagram.svg").write_text("<svg/>", encoding="utf-8")
    (folder / "broken.md").write_text("---\nkey: [unclosed\n---\nBody\n", encoding="utf-8")
    with Retrieval(Context(db_path=str(tmp_path / "api.db"))) as retrieval:
        report = retrieval.ingest([folder])
    assert report.written == report.documents == 5  # commission, notes, page and two JSONL records
    assert report.unsupported_files == [str(folder / "diagram.svg"), str(folder / "ignored.bin")]
    assert len(report.skipped_files) == 1 and report.skipped_files[0].startswith(f"{folder / 'broken.md'}:")
    with SQLiteStore(tmp_path / "api.db") as store:
        assert store.stats().documents == 5


def test_the_bar_counts_texts_as_they_are_embedded_even_inside_one_large_document(tmp_path, embedder):
    sections = "\n\n".join(f"## Part {i}\n\nClause {i} of the lease." for i in range(150))
    big = Document(id="lease", title="Lease", content=sections)
    heard: list[int] = []
    embedder.batch_size = 64
    with SQLiteStore(tmp_path / "big.db") as store:
        report = IngestReport()
        rows = [big, *chunk_document(big)]
        embed_rows(rows, store, embedder, report, heard.append)
    assert len(rows) == 151 and report.embedded == 151
    assert heard == [0, 64, 64, 23, 0]  # nothing reused; three batches; no repeated text


def test_reembed_with_nothing_to_do_draws_no_bar(tmp_path, embedder, capsys):
    with SQLiteStore(tmp_path / "done.db") as store:
        ingest([Document(id="a", title="A", content="Alpha.")], store, embedder, progress=False)
        report = reembed(store, embedder, progress=True)
    assert report.embedded == 0 and capsys.readouterr().err == ""


def test_an_interrupted_ingest_of_a_large_file_keeps_what_it_embedded(tmp_path):
    class Interrupted(WordHashEmbeddings):
        def embed_documents(self, texts):
            if self.documents_embedded + len(texts) > 700:  # inside the second part
                raise KeyboardInterrupt
            return super().embed_documents(texts)

    from agent_retrieval.ingest import TEXTS_PER_PART

    sections = "\n\n".join(f"## Clause {i}\n\nTerm {i} of the lease, clause number {i}." for i in range(1200))
    big = Document(id="lease", title="Lease", content=sections)
    texts = 1 + len(chunk_document(big))
    with SQLiteStore(tmp_path / "big.db") as store:
        with pytest.raises(KeyboardInterrupt):
            ingest([big], store, Embedder(Interrupted(), "test/word-hash"), progress=False)
        stats = store.stats()
        assert (stats.documents, stats.chunks) == (1, texts - 1)  # the document is whole
        kept = texts - stats.documents_missing_embeddings - stats.chunks_missing_embeddings
        assert kept == TEXTS_PER_PART  # the first part's vectors, committed before the interruption
        again = WordHashEmbeddings()
        report = ingest([big], store, Embedder(again, "test/word-hash"), progress=False)
        assert (report.reused, report.embedded, again.documents_embedded) == (
            kept,
            texts - kept,
            texts - kept,
        )
        assert store.stats().chunks_missing_embeddings == 0


def test_prune_removes_a_jsonl_record_no_longer_in_its_file(tmp_path, embedder):
    from agent_retrieval import Context, Retrieval, ingest_paths

    records = tmp_path / "docs" / "records.jsonl"
    records.parent.mkdir()
    records.write_text('{"id": "r1", "text": "One."}\n{"id": "r2", "text": "Two."}\n', encoding="utf-8")
    with Retrieval(Context(db_path=str(tmp_path / "j.db")), embedder=embedder) as retrieval:
        ingest_paths([records.parent], retrieval=retrieval)
        records.write_text('{"id": "r1", "text": "One."}\n', encoding="utf-8")
        report = ingest_paths([records.parent], retrieval=retrieval, prune=True)
        assert report.removed == ["r2"] and sorted(retrieval.store.document_states(["r1", "r2"])) == ["r1"]


def test_a_retrieval_ingests_documents_into_its_own_store_embedding_only_what_changed(tmp_path, monkeypatch):
    from agent_retrieval import Context, Document, Retrieval

    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/word-hash"),
    )
    documents = [Document(id="fees", title="Fees", content="Our fee is 1.5% of the sale price.")]
    with Retrieval(Context(db_path=str(tmp_path / "docs.db"))) as retrieval:
        first = retrieval.ingest_documents(documents)
        again = retrieval.ingest_documents(documents)
        assert (first.written, first.embedded > 0) == (1, True)
        assert (again.unchanged, again.embedded) == (1, 0)
        assert retrieval.store.stats().documents == 1
