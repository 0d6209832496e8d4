"""Ingestion: files -> documents -> chunks -> embeddings -> store, embedding only what changed; and re-embedding.

Every chunk is embedded as "heading path + content" (the heading path starts with the title), every
document as "title + lead". A vector already stored for the same text and model is reused, so
re-running on unchanged input embeds nothing. Each batch of documents is written, with all its
chunks, in one transaction: a crash leaves whole documents or none.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any

import yaml
from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter
from tqdm import tqdm  # text bars: tqdm.auto warns in notebooks without ipywidgets

from agent_retrieval.context import Context
from agent_retrieval.embeddings import Embedder
from agent_retrieval.errors import EmbeddingError, InvalidRequest, StoreError
from agent_retrieval.models import MAX_NESTING, Chunk, Document, Level, is_unicode, nesting_depth
from agent_retrieval.stores.base import Store, check_rows

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".jsonl", ".pdf")
DOCUMENT_LEAD_CHARS = 1000  # a document is embedded by its title and opening; chunks carry the rest
DOCUMENTS_PER_BATCH = 32
MAX_METADATA_CHARS = 20_000  # of a document's metadata as JSON: every one of its chunks stores a copy
_HEADINGS = [("#", "h1"), ("##", "h2"), ("###", "h3")]
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # in JSON text; usually half of a valid pair
_LONE_SURROGATE = (
    "a lone surrogate (an unpaired \\ud800 to \\udfff escape), which is not text; fix or remove that escape"
)


# --- loading ------------------------------------------------------------------------------------


def load_documents(
    paths: Iterable[str | Path], *, root: str | Path | None = None, skipped: list[str] | None = None
) -> Iterator[Document]:
    """Documents from files and folders (searched recursively for the supported suffixes).

    Ids are the path relative to the folder given, without suffix ("policies/fees"); a file given
    directly is named by its stem; JSONL records carry their own ids.

    A file that cannot be loaded (gone, unreadable, not a regular file, malformed, nested or sized past the
    limits) raises InvalidRequest naming it, and the line where it has lines; given `skipped`, it becomes
    one line there instead and the other files still load. With `root`, every file read must lie inside
    that folder once symlinks are resolved (those met inside a folder too): a path or symlink leading out
    is refused, naming it. A path given that names nothing, an unsupported file or a place outside `root`
    is always raised: the caller named it.
    """
    inside = Path(os.path.realpath(Path(root).expanduser())) if root is not None else None

    def refuse(problem: InvalidRequest) -> None:
        if skipped is None:
            raise problem
        skipped.append(str(problem))

    for raw in paths:
        path = Path(raw).expanduser()
        if inside is not None:
            _inside(path, inside)  # first, so nothing tells whether a path outside exists
        if path.is_dir():
            for file in _folder_files(path, inside, refuse):
                doc_id = file.relative_to(path).with_suffix("").as_posix()
                yield from _load_or_refuse(file, doc_id, inside, refuse)
        elif path.is_file():
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise InvalidRequest(
                    f"{path}: unsupported file type {path.suffix or '(none)'}; "
                    f"supported: {', '.join(SUPPORTED_SUFFIXES)}"
                )
            yield from _load_or_refuse(path, path.stem, inside, refuse)
        else:
            raise InvalidRequest(f"{path}: no such file or folder")


def _folder_files(folder: Path, root: Path | None, refuse: Callable[[InvalidRequest], None]) -> list[Path]:
    """The files under `folder` with a supported suffix, sorted; a subfolder that cannot be listed is refused.

    Symlinked folders are not followed (a link to a parent would never end); with `root`, one leading out
    of it is refused by name rather than passed over in silence."""

    def unlistable(error: OSError) -> None:
        refuse(
            InvalidRequest(
                f"{error.filename}: cannot be listed ({error.strerror}); check its "
                "permissions, then load it again"
            )
        )

    files: list[Path] = []
    for where, folders, names in os.walk(folder, onerror=unlistable):
        here = Path(where)
        for name in folders if root is not None else ():
            if (here / name).is_symlink():
                try:
                    _inside(here / name, root)
                except InvalidRequest as problem:
                    refuse(problem)
        files += [here / name for name in names if Path(name).suffix.lower() in SUPPORTED_SUFFIXES]
    return sorted(files)


def _load_or_refuse(
    path: Path, doc_id: str, root: Path | None, refuse: Callable[[InvalidRequest], None]
) -> list[Document]:
    try:
        return load_file(path, doc_id, root=root)
    except InvalidRequest as problem:
        refuse(problem)
        return []


def _inside(path: Path, root: Path) -> Path:
    """Where `path` leads, symlinks and '..' resolved; refused unless that is inside `root` (resolved)."""
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(root):
        raise InvalidRequest(
            f"{path}: leads outside {root}; refused: only files inside {root} may be loaded "
            "(symlinks resolved)"
        )
    return target


def _open(path: Path, root: Path | None, *, binary: bool = False) -> IO[Any]:
    """`path` opened for reading; as text, UTF-8 with each undecodable byte kept as a lone surrogate, so the
    reader can name the line. Only a regular file is read (a pipe named notes.md would block the read
    forever); with `root`, only one inside it, checked again once open, as the path may have been swapped
    for a symlink in between."""
    if root is not None:
        _inside(path, root)
    opener = _open_without_waiting
    if binary:
        file: IO[Any] = open(path, "rb", opener=opener)  # noqa: SIM115 - the caller closes it
    else:
        file = open(path, encoding="utf-8", errors="surrogateescape", opener=opener)  # noqa: SIM115
    try:
        opened = os.fstat(file.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise InvalidRequest(
                f"{path}: not a regular file (a pipe, socket or device); only files are loaded"
            )
        if root is not None and not os.path.samestat(opened, os.stat(_inside(path, root))):
            raise InvalidRequest(f"{path}: changed while it was opened (replaced by another file); refused")
    except BaseException:
        file.close()
        raise
    return file


def _open_without_waiting(name: str, flags: int) -> int:
    # Opening a pipe for reading waits for a writer; non-blocking, it opens at once and fstat refuses it.
    return os.open(name, flags | getattr(os, "O_NONBLOCK", 0))


def _unreadable(path: Path, error: OSError) -> str:
    """What to say about a file whose opening or reading failed."""
    if isinstance(error, FileNotFoundError):
        return (
            f"{path}: does not exist (deleted or moved while loading, or a symlink to nothing); nothing "
            "of it was loaded"
        )
    reason = error.strerror or type(error).__name__
    return f"{path}: cannot be read ({reason}); check its permissions, then load it again"


def load_file(path: Path, doc_id: str, *, root: Path | None = None) -> list[Document]:
    """The documents in one file (only inside the resolved folder `root`, if given; see load_documents)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(_load_jsonl(path, root))
    try:
        with _open(path, root, binary=suffix == ".pdf") as file:
            data = file.read()
    except OSError as error:
        raise InvalidRequest(_unreadable(path, error)) from None
    if isinstance(data, bytes):
        return [_load_pdf(path, doc_id, data)]
    if not is_unicode(data):
        raise InvalidRequest(f"{path}: not UTF-8 text")
    text: str = data
    metadata: dict[str, Any] = {}
    if suffix in (".md", ".markdown"):
        metadata, text = _front_matter(path, text)
    elif suffix in (".html", ".htm"):
        title, text = _html_to_markdown(path, text)
        metadata = {"title": title} if title else {}
    title = str(metadata.pop("title", "") or _first_heading(text) or _name_as_title(path))
    doc_id = str(metadata.pop("id", doc_id))
    return [Document(id=doc_id, title=title, content=text.strip(), metadata=metadata, source=str(path))]


class _Refused(yaml.MarkedYAMLError):
    """Front matter that is valid YAML but is not read (the problem says why)."""


class _FrontMatterLoader(yaml.SafeLoader):
    """YAML's safe subset without what a hostile file abuses: anchors and aliases (an alias repeats a node,
    so a few hundred bytes of aliases to aliases expand to gigabytes) and nesting past MAX_NESTING (the
    composer recurses once per level)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                problem="uses a YAML anchor or alias (&name or *name); write each value out in "
                "full (aliases can expand a few bytes into gigabytes)",
                problem_mark=event.start_mark,
            )
        nests = isinstance(event, yaml.CollectionStartEvent)
        if nests and self.depth == MAX_NESTING:
            raise _Refused(
                problem=f"is nested more than {MAX_NESTING} levels deep; flatten it",
                problem_mark=event.start_mark,
            )
        self.depth += nests
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nests


def _front_matter(path: Path, text: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\s*\n(.*?)\n---\s*(?:\n|$)", text, re.DOTALL)
    if not match:
        return {}, text
    yaml_text, first_line = match.group(1), text.count("\n", 0, match.start(1)) + 1
    try:
        data = yaml.load(yaml_text, Loader=_FrontMatterLoader) or {}
    except yaml.YAMLError as error:
        mark, where = getattr(error, "problem_mark", None), str(path)
        if mark is not None:
            where = f"{path}:{first_line + mark.line}"
        elif isinstance(error, yaml.reader.ReaderError):  # a character YAML refuses: it knows only the offset
            lines_before = yaml_text.count("\n", 0, error.position)
            where = f"{path}:{first_line + lines_before}"
        if isinstance(error, _Refused):
            raise InvalidRequest(f"{where}: front matter {error.problem}") from None
        problem = getattr(error, "problem", None) or getattr(error, "reason", None) or type(error).__name__
        raise InvalidRequest(f"{where}: front matter is not valid YAML ({problem})") from None
    except ValueError as error:  # a date that does not exist; an integer of more digits than Python converts
        raise InvalidRequest(
            f"{path}: front matter holds a value YAML cannot convert ({str(error)[:100]}); "
            "quote it to keep it as text"
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path}: front matter must be a mapping of keys to values")
    metadata = {str(k): _plain(v) for k, v in data.items()}
    return _checked_metadata(str(path), metadata), text[match.end() :]


def _plain(value: Any) -> Any:
    """Metadata values as JSON types (YAML dates become ISO strings)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _checked_metadata(where: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as a store keeps it: JSON (no NaN or infinity), valid Unicode, at most MAX_METADATA_CHARS.
    Its depth is bounded where it is parsed."""
    try:
        text = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise InvalidRequest(
            f"{where}: metadata holds NaN or infinity, which JSON cannot store; quote the "
            "value or leave it out"
        ) from None
    if not is_unicode(text):
        raise InvalidRequest(f"{where}: metadata holds {_LONE_SURROGATE}")
    if len(text) > MAX_METADATA_CHARS:
        raise InvalidRequest(
            f"{where}: metadata is {len(text):,} characters of JSON, over the "
            f"{MAX_METADATA_CHARS:,} allowed (every chunk keeps a copy); keep metadata to "
            "short facts and put long text in the body"
        )
    return metadata


def _name_as_title(path: Path) -> str:
    """The title of a file that names none: its name, words apart."""
    return path.stem.replace("-", " ").replace("_", " ")


def _first_heading(text: str) -> str | None:
    match = re.search(r"^#\s+(.+?)\s*#*\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def jsonl_records(
    path: Path, error: type[InvalidRequest] = InvalidRequest, *, root: Path | None = None
) -> Iterator[tuple[str, Any]]:
    """Each non-blank line's JSON value with its place ("file:line"). `error` names the file that cannot be
    read, or the line that is not UTF-8, not JSON, nested past MAX_NESTING or holds a lone surrogate.
    `root` confines the file as load_documents does."""
    try:
        with _open(path, root) as lines:
            for number, line in enumerate(lines, start=1):
                where = f"{path}:{number}"
                if not line.strip():
                    continue
                if not is_unicode(line):  # the reader kept undecodable bytes as lone surrogates
                    raise error(f"{where}: not UTF-8 text")
                try:
                    record = json.loads(line)
                    too_deep = nesting_depth(record) > MAX_NESTING
                except RecursionError:  # nested thousands deep: json gives up before we could count
                    too_deep = True
                except json.JSONDecodeError as problem:
                    raise error(f"{where}: not valid JSON ({problem.msg})") from None
                except ValueError:  # json reads every integer, and Python refuses to convert the longest
                    digits = sys.get_int_max_str_digits()
                    raise error(
                        f"{where}: not valid JSON (a number of more than {digits} digits); quote it "
                        "to keep it as text"
                    ) from None
                if too_deep:
                    raise error(f"{where}: nested more than {MAX_NESTING} levels deep; flatten the record")
                if _SURROGATE_ESCAPE.search(line) and not is_unicode(json.dumps(record, ensure_ascii=False)):
                    raise error(f"{where}: holds {_LONE_SURROGATE}")
                yield where, record
    except OSError as problem:
        raise error(_unreadable(path, problem)) from None


def _load_jsonl(path: Path, root: Path | None) -> Iterator[Document]:
    for where, record in jsonl_records(path, root=root):
        if not isinstance(record, dict):
            raise InvalidRequest(f"{where}: each line must be a JSON object with id and text")
        doc_id, text = record.get("id", record.get("_id")), record.get("text")
        if doc_id in (None, "") or not isinstance(text, str):
            raise InvalidRequest(
                f"{where}: needs a non-empty 'id' and a string 'text' (optional: 'title', 'metadata')"
            )
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InvalidRequest(f"{where}: 'metadata' must be an object")
        yield Document(
            id=str(doc_id),
            title=str(record.get("title") or doc_id),
            content=text.strip(),
            metadata=_checked_metadata(where, metadata),
            source=where,
        )


def _load_pdf(path: Path, doc_id: str, data: bytes) -> Document:
    """A PDF's text layer, page after page (scanned pages without text yield nothing: no OCR here)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise InvalidRequest(
            f"{path}: reading PDF needs the 'pdf' extra: pip install 'agent-retrieval[pdf]'"
        ) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except (PdfReadError, ValueError, OSError) as error:
        raise InvalidRequest(f"{path}: not a readable PDF ({type(error).__name__})") from None
    text = "\n\n".join(p for p in pages if p)
    if not text:
        raise InvalidRequest(f"{path}: the PDF has no text layer (scanned pages need OCR first)")
    return Document(
        id=doc_id,
        title=title or _name_as_title(path),
        content=text,
        metadata={"pages": len(pages)},
        source=str(path),
    )


class _HTMLText(HTMLParser):
    """Visible text of an HTML page, with h1-h3 turned into markdown headings for the chunker."""

    _SKIP = {"script", "style", "noscript", "template", "head"}
    _BLOCK = {
        "p",
        "div",
        "section",
        "article",
        "li",
        "tr",
        "br",
        "table",
        "ul",
        "ol",
        "pre",
        "blockquote",
        "h4",
        "h5",
        "h6",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        if tag == "title":
            self._in_title = True
        elif tag in ("h1", "h2", "h3"):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCK:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        if tag == "title":
            self._in_title = False
        elif tag in ("h1", "h2", "h3") or tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(re.sub(r"\s+", " ", data))


def _html_to_markdown(path: Path, html: str) -> tuple[str, str]:
    parser = _HTMLText()
    try:
        parser.feed(html)
        parser.close()
    except AssertionError as error:  # html.parser's answer to a marked section it does not know, "<![x["
        raise InvalidRequest(f"{path}: not readable HTML ({error})") from None
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", "".join(parser.parts))
    return " ".join(parser.title.split()), re.sub(r"\n{3,}", "\n\n", text).strip()


# --- chunking and embedding text ------------------------------------------------------------------


def chunk_document(document: Document, chunk_size: int = 1000, chunk_overlap: int = 150) -> list[Chunk]:
    """Split a document by its markdown headings, then by size; each chunk knows its heading path."""
    sections = MarkdownHeaderTextSplitter(_HEADINGS, strip_headers=True).split_text(document.content)
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunks: list[Chunk] = []
    for section in sections:
        headings = [section.metadata[key] for _, key in _HEADINGS if section.metadata.get(key)]
        if headings and headings[0] == document.title:
            headings = headings[1:]
        heading_path = " > ".join([document.title, *headings])
        for piece in splitter.split_text(section.page_content):
            if piece.strip():
                chunks.append(
                    Chunk(
                        id=f"{document.id}#{len(chunks)}",
                        document_id=document.id,
                        ordinal=len(chunks),
                        content=piece.strip(),
                        heading_path=heading_path,
                        metadata=dict(document.metadata),
                    )
                )
    return chunks


def document_text(document: Document) -> str:
    """What a document is embedded as: its title and lead."""
    return f"{document.title}\n\n{document.content[:DOCUMENT_LEAD_CHARS]}"


def chunk_text(chunk: Chunk) -> str:
    """What a chunk is embedded as: its heading path (title first) and content."""
    return f"{chunk.heading_path}\n\n{chunk.content}"


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# --- ingesting ------------------------------------------------------------------------------------


@dataclass
class IngestReport:
    """What an ingest or re-embed did."""

    documents: int = 0
    unchanged: int = 0
    written: int = 0
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    unembedded: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"{self.documents} documents: {self.written} written ({self.chunks} chunks), "
            f"{self.unchanged} unchanged; {self.embedded} texts embedded, {self.reused} vectors reused"
        )
        if self.unembedded:
            text += f"; {self.unembedded} texts left unembedded (run `agent-retrieval reembed` later)"
        return text


def ingest(
    documents: Iterable[Document],
    store: Store,
    embedder: Embedder,
    context: Context | None = None,
    *,
    progress: bool = True,
    on_batch: Callable[[IngestReport], None] | None = None,
    public: bool = False,
) -> IngestReport:
    """Write documents and their chunks, embedding only texts whose (text, model) has no stored vector.

    If embedding fails (provider down), rows are stored without vectors, keyword search finds them at
    once, and `reembed` adds the vectors later: nothing is lost. `public` publishes what this call writes
    to every tenant and to anonymous readers (Postgres and Supabase): the operator's explicit act, never a
    document's own metadata. Without it documents are written private, an earlier published version too.
    """
    context = context or Context()
    if mismatch := store.model_mismatch(embedder.model_id):
        raise mismatch
    unique: dict[str, Document] = {}
    for doc in documents:
        if doc.id in unique:
            log.warning("document id %r appears twice; the later one (%s) is kept", doc.id, doc.source)
        unique[doc.id] = doc
    report = IngestReport(documents=len(unique))
    docs = [doc for doc in unique.values() if _storable(doc, [], report)]
    for doc in docs:
        doc.content_hash = _hash(
            doc.title, doc.content, doc.metadata, context.chunk_size, context.chunk_overlap
        )
        doc.public = public
    store.check_public(docs)
    states = store.document_states([d.id for d in docs])
    todo = [
        d
        for d in docs
        if (state := states.get(d.id)) is None
        or (state.content_hash, state.embedded, state.public) != (d.content_hash, True, d.public)
    ]
    report.unchanged = len(docs) - len(todo)
    bar = tqdm(total=len(todo), unit="doc", desc="ingest", disable=not progress or len(todo) < 2)
    for start in range(0, len(todo), DOCUMENTS_PER_BATCH):
        batch: list[Document] = []
        chunks: list[Chunk] = []
        for doc in todo[start : start + DOCUMENTS_PER_BATCH]:
            doc_chunks = chunk_document(doc, context.chunk_size, context.chunk_overlap)
            if _storable(doc, doc_chunks, report):  # its chunk ids are longer than its own
                batch.append(doc)
                chunks += doc_chunks
        _embed_or_leave_unembedded([*batch, *chunks], store, embedder, report)
        try:
            store.upsert(batch, chunks, embedder.model_id)
        except StoreError as error:
            bar.close()
            # Each batch commits whole, so what was stored is complete and a re-run only adds the rest.
            # The error keeps its class: StoreUnavailable tells a caller that retrying may work.
            raise type(error)(
                f"{error}. Stopped after storing {report.written} of the {len(todo)} documents this "
                "ingest had to write: once that is fixed, run the same ingest again to finish "
                "(stored documents are skipped and their vectors kept)"
            ) from error
        report.written += len(batch)
        report.chunks += len(chunks)
        bar.update(len(todo[start : start + DOCUMENTS_PER_BATCH]))
        if on_batch:
            on_batch(report)
    bar.close()
    return report


# Sources of documents a caller wrote (an agent's index_document, a run's pasted documents): such a writer may
# replace what callers wrote before, never what the operator ingested or published.
REQUEST_SOURCES = ("index_document", "indexer")


def protected_ids(store: Store, documents: Sequence[Document]) -> list[str]:
    """The ids among `documents` that a caller may not replace: published documents, and documents the
    operator ingested (from files, or from code)."""
    states = store.document_states([d.id for d in documents])
    return [
        doc_id
        for doc_id, state in states.items()
        if state.public or (state.source or "").split(" ", 1)[0] not in REQUEST_SOURCES
    ]


def _storable(document: Document, chunks: Sequence[Chunk], report: IngestReport) -> bool:
    """Whether the store can hold the document (and these chunks of it); if not, it is skipped with a note
    saying why (a NUL in a text file, an id too long to name), so one bad document never stops an ingest.
    The rule is the store's own (check_rows)."""
    try:
        check_rows([document], chunks)
    except InvalidRequest as error:
        message = f"{document.source or document.id!r}: skipped: {error}"
        log.warning(message)
        report.errors.append(message)
        return False
    return True


def embed_rows(
    rows: Sequence[Document | Chunk], store: Store, embedder: Embedder, report: IngestReport
) -> None:
    """Give each row its `text_hash` and `embedding`: a vector stored for the same text and model is reused,
    and each other text is embedded once. Counts both in `report`. Raises EmbeddingError when the provider
    fails, leaving the embedding of every row it did not reach None."""
    texts = [document_text(r) if isinstance(r, Document) else chunk_text(r) for r in rows]
    for row, text in zip(rows, texts, strict=True):
        row.text_hash = _hash(text)
    known = store.vectors_by_hash([r.text_hash for r in rows], embedder.model_id)
    missing: dict[str, str] = {}  # text hash -> text, for each text without a stored vector
    for row, text in zip(rows, texts, strict=True):
        row.embedding = known.get(row.text_hash)
        if row.embedding is None:
            missing.setdefault(row.text_hash, text)
    report.reused += len(rows) - sum(1 for r in rows if r.embedding is None)
    if not missing:
        return
    vectors = dict(zip(missing, embedder.embed_documents(list(missing.values())), strict=True))
    report.embedded += len(missing)
    for row in rows:
        if row.embedding is None:
            row.embedding = vectors[row.text_hash]


def _embed_or_leave_unembedded(
    rows: Sequence[Document | Chunk], store: Store, embedder: Embedder, report: IngestReport
) -> None:
    """`embed_rows`, but a provider failure leaves the rows it did not reach unembedded, for keyword search
    now and `reembed` later: nothing is lost."""
    try:
        embed_rows(rows, store, embedder, report)
    except EmbeddingError as error:
        message = f"embedding failed ({error}); rows stored without vectors"
        log.warning(message)
        report.errors.append(message)
        report.unembedded += len({r.text_hash for r in rows if r.embedding is None})


def reembed(
    store: Store, embedder: Embedder, *, batch_size: int = 256, progress: bool = True
) -> IngestReport:
    """Give every row a vector from `embedder`: backfill missing ones, replace another model's.

    Until every row has a new vector, vector search serves only rows still holding the declared
    model's vectors (keyword search serves all); then the store declares the new model.
    """
    report = IngestReport()
    stats = store.stats()
    total = stats.documents + stats.chunks
    bar = tqdm(total=total, unit="row", desc="reembed", disable=not progress or total < 2)
    dimension = None
    levels: list[Level] = ["documents", "chunks"]
    for level in levels:
        while rows := store.pending_embeddings(level, embedder.model_id, batch_size):
            embed_rows(rows, store, embedder, report)
            dimension = len(rows[-1].embedding)
            store.set_embeddings(level, rows, embedder.model_id)
            bar.update(len(rows))
    bar.close()
    current = store.embedding_model()
    if dimension is not None and current != (embedder.model_id, dimension):
        store.set_embedding_model(embedder.model_id, dimension)
    report.documents = stats.documents
    report.chunks = stats.chunks
    return report
