"""Loaders: files and folders -> Documents (markdown with front matter, text, HTML, JSONL, PDF), read as
untrusted input: bounded in size and nesting, confined to a root folder when one is given.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import fnmatch
import functools
import io
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from agent_retrieval.core.progress import bar as progress_bar
from agent_retrieval.core.text import has_words
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import asciidoc, formats, myst, sitemarkup
from agent_retrieval.ingest.ignore import Ignores
from agent_retrieval.models import MAX_NESTING, Document, is_unicode, nesting_depth

MARKDOWN = (".md", ".markdown", ".mdx", ".qmd", ".rmd")  # Docusaurus' MDX, Quarto's and R Markdown's
# Files read as text into markdown, and office files read from their bytes (each through an optional extra).
_TEXT_READERS: dict[str, Callable[[Path, str], tuple[dict[str, Any], str]]] = {
    ".txt": formats.text_to_markdown,
    ".html": formats.html_to_markdown,
    ".htm": formats.html_to_markdown,
    ".rst": formats.rst_to_markdown,
    ".adoc": asciidoc.to_markdown,
    ".asciidoc": asciidoc.to_markdown,
    ".csv": formats.csv_to_markdown,
    ".tsv": formats.csv_to_markdown,
    ".ipynb": formats.ipynb_to_markdown,
    ".json": formats.json_to_markdown,
    **dict.fromkeys(formats.CODE_LANGUAGES, formats.code_to_markdown),
}
_BYTES_READERS: dict[str, Callable[[Path, bytes], tuple[dict[str, Any], str]]] = {
    ".docx": formats.docx_to_markdown,
    ".pptx": formats.pptx_to_markdown,
    ".xlsx": formats.xlsx_to_markdown,
}
SUPPORTED_SUFFIXES = tuple(
    dict.fromkeys((*MARKDOWN, ".txt", ".jsonl", ".pdf", *_TEXT_READERS, *_BYTES_READERS))
)  # the commonest first, as messages list them
# Folders of installed dependencies and build output met inside a folder: other people's code, not this
# folder's documents (hidden ones, .git and .venv, are passed over too). A folder given by name is read.
DEPENDENCY_FOLDERS = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "bower_components"})
# Met inside a folder, left out unless named, and listed (a dry run shows them): what documentation tools
# build (Sphinx's _build, MkDocs' site, Jekyll's _site, build and dist), and their configuration as code
# (Sphinx's conf.py, a JavaScript site's package and TypeScript settings, Docusaurus' config and sidebars),
# which is no page of the documentation (VitePress' tsconfig.json, JSON with comments, failed every ingest).
BUILD_FOLDERS = frozenset({"_build", "_site", "site", "build", "dist"})
TOOL_FILES = frozenset(
    {"conf.py", "package.json", "package-lock.json", "tsconfig.json", "docusaurus.config.js",
     "docusaurus.config.ts", "sidebars.js", "sidebars.ts"}
)  # fmt: skip
MAX_METADATA_CHARS = 20_000  # of a document's metadata as JSON: every one of its chunks stores a copy
MAX_FILE_BYTES = 100 * 1024 * 1024  # of one file read whole (JSONL is read a line at a time)
MAX_PDF_PAGES = 2_000  # a long manual; 100,000 pages of nothing took 145 s and 435 MB
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # in JSON text; usually half of a valid pair
_LONE_SURROGATE = (
    "a lone surrogate (an unpaired \\ud800 to \\udfff escape), which is not text; fix or remove that escape"
)


def load_documents(
    paths: Iterable[str | Path],
    *,
    root: str | Path | None = None,
    skipped: list[str] | None = None,
    unsupported: list[Path] | None = None,
    left_out: list[Path] | None = None,
    wordless: list[str] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    gitignore: bool = True,
    progress: bool = False,
) -> Iterator[Document]:
    """Documents from files and folders (searched recursively for the supported suffixes).

    Ids are the path relative to the folder given, without suffix ("policies/fees"); a file given
    directly is named by its stem; JSONL records carry their own ids.

    A file that cannot be loaded (gone, unreadable, not a regular file, malformed, nested or sized past the
    limits) raises InvalidRequest naming it, and the line where it has lines; given `skipped`, it becomes
    one line there instead and the other files still load. With `root`, every file read must lie inside
    that folder once symlinks are resolved (those met inside a folder too): a path or symlink leading out
    is refused, naming it. A path given that names nothing, an unsupported file or a place outside `root`
    is always raised: the caller named it. Without `root`, a folder's files are confined to the folder the
    same way (a `deploy-key.txt` linking to ~/.ssh is refused by name) unless `follow_symlinks`; a file named
    directly is read wherever it leads. Files of other types met in a folder are passed over and, given
    `unsupported`, listed there; hidden files and folders (".git", ".DS_Store") and DEPENDENCY_FOLDERS
    ("node_modules") met inside a folder are not looked at, and BUILD_FOLDERS, TOOL_FILES and (with
    `gitignore`) what the folder's .gitignore files name (ignore.py) are left out and, given `left_out`,
    listed there. A file met in a folder with no words of its own (a page template of tags alone, a redirect
    stub, a page that only includes another file) is, given `wordless`, listed there with why instead of
    refused: a folder's ordinary contents, as its images are.
    `include` and `exclude` are shell-style patterns (fnmatch: `*` crosses folders too) matched against a
    folder's files' paths relative to it ("guides/*.md", "*/drafts/*"): with `include`, only files matching
    one are looked at; a file matching an `exclude` pattern is not (of any type). A file named directly is
    always read. With `progress`, a bar counts each folder's files as they are read.
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
            confined = inside or (None if follow_symlinks else Path(os.path.realpath(path)))
            selected = functools.partial(_selected, include=include, exclude=exclude)
            found = _folder_files(path, confined, refuse, selected, unsupported, left_out, gitignore)
            ids = _document_ids(found, path)
            with progress_bar(len(found), unit="file", desc="read", enabled=progress) as bar:
                for file in found:
                    yield from _load_or_refuse(file, ids[file], confined, refuse, wordless)
                    bar.update()
        elif path.is_file():
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise InvalidRequest(
                    f"{path}: unsupported file type {path.suffix or '(none)'}; "
                    f"supported: {', '.join(SUPPORTED_SUFFIXES)}"
                )
            yield from _load_or_refuse(path, path.stem, inside, refuse)
        else:
            raise InvalidRequest(f"{path}: no such file or folder")


def _folder_files(
    folder: Path,
    root: Path | None,
    refuse: Callable[[InvalidRequest], None],
    selected: Callable[[str], bool],
    unsupported: list[Path] | None = None,
    left_out: list[Path] | None = None,
    gitignore: bool = True,
) -> list[Path]:
    """The files under `folder` with a supported suffix whose relative path is `selected`, sorted; the other
    selected files added to `unsupported`, build folders, tool files and what .gitignore names (with
    `gitignore`) to `left_out`; hidden ones are skipped. A subfolder that cannot be listed is refused.

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

    def entering(ignores: Ignores, where: Path, relative: tuple[str, ...]) -> Ignores:
        return ignores.entering(where, relative) if gitignore else ignores

    rules = {folder: entering(Ignores(), folder, ())}
    for where, folders, names in os.walk(folder, onerror=unlistable):
        here = Path(where)
        relative = here.relative_to(folder).parts
        ignores = rules.pop(here)
        folders[:] = [name for name in folders if not name.startswith(".") and name not in DEPENDENCY_FOLDERS]
        left = [
            name
            for name in folders
            if name in BUILD_FOLDERS or ignores.ignored((*relative, name), folder=True)
        ]
        if left_out is not None:
            left_out += [here / name for name in left]
        folders[:] = [name for name in folders if name not in left]
        rules.update({here / name: entering(ignores, here / name, (*relative, name)) for name in folders})
        for name in folders:
            if root is not None and (here / name).is_symlink():
                try:
                    _inside(here / name, root)
                except InvalidRequest as problem:
                    refuse(problem)
        for name in names:
            if name.startswith(".") or not selected((here / name).relative_to(folder).as_posix()):
                continue
            if name in TOOL_FILES or ignores.ignored((*relative, name), folder=False):
                if left_out is not None:
                    left_out.append(here / name)
            elif Path(name).suffix.lower() in SUPPORTED_SUFFIXES:
                files.append(here / name)
            elif unsupported is not None:
                unsupported.append(here / name)
    return sorted(files)


def _selected(relative: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether a folder's file (its path relative to the folder) passes the include and exclude patterns."""
    if include and not any(fnmatch.fnmatchcase(relative, pattern) for pattern in include):
        return False
    return not any(fnmatch.fnmatchcase(relative, pattern) for pattern in exclude)


def describe_unsupported(files: Iterable[str | Path], *, shown: int = 3) -> list[str]:
    """One line per file type passed over, naming a few of its files: a thousand images stay a line."""
    by_type: dict[str, list[Path]] = {}
    for file in map(Path, files):
        by_type.setdefault(file.suffix.lower() or "(no suffix)", []).append(file)
    lines = []
    for suffix, group in sorted(by_type.items(), key=lambda item: (-len(item[1]), item[0])):
        names = ", ".join(str(f) for f in sorted(group)[:shown])
        more = f" and {len(group) - shown} more" if len(group) > shown else ""
        lines.append(f"{len(group)} {suffix} file{'s' if len(group) > 1 else ''} ({names}{more})")
    return lines


def _document_ids(files: list[Path], folder: Path) -> dict[Path, str]:
    """Each file's document id: its path in the folder without the suffix, or with it where two files differ
    only there (`example.py` beside the `example.rst` that shows it), so neither replaces the other."""
    stems = {file: file.relative_to(folder).with_suffix("").as_posix() for file in files}
    shared = collections.Counter(stems.values())
    return {
        file: stem if shared[stem] == 1 else file.relative_to(folder).as_posix()
        for file, stem in stems.items()
    }


class _NoWords(InvalidRequest):
    """A file that holds no words of its own to index."""


def _load_or_refuse(
    path: Path,
    doc_id: str,
    root: Path | None,
    refuse: Callable[[InvalidRequest], None],
    wordless: list[str] | None = None,
) -> list[Document]:
    try:
        return load_file(path, doc_id, root=root)
    except _NoWords as problem:
        if wordless is None:
            refuse(problem)
        else:
            wordless.append(str(problem))
    except InvalidRequest as problem:
        refuse(problem)
    except Exception as error:  # a parser's own failure (pypdf's limits, lxml, docutils, a recursion)
        refuse(InvalidRequest(f"{path}: could not be read ({_reason(error)}); nothing of it was loaded"))
    return []


def _reason(error: BaseException) -> str:
    """A library's error in one short line: its type, and the start of its message."""
    message = " ".join(str(error).split())[:160]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


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
        with _open(path, root, binary=True) as file:
            data = _read_at_most(file, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise InvalidRequest(_unreadable(path, error)) from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(
            f"{path}: larger than the {MAX_FILE_BYTES // 2**20} MB one file may be; split it into several"
        )
    if suffix == ".pdf":
        return [_load_pdf(path, doc_id, data)]
    encoding = "utf-8"
    metadata: dict[str, Any] = {}
    if suffix in _BYTES_READERS:
        metadata, text = _BYTES_READERS[suffix](path, data)
    else:
        text, encoding = _decoded(path, data)
        if suffix in MARKDOWN:
            metadata, text = _front_matter(path, text)
            text = tidy_markdown(text)  # markdown as its writer marked it up; other readers write it plain
            # what the front matter tells readers (a function's definition, a page's summary) opens the text;
            # a page of front matter alone is its title
            text = "\n\n".join(
                part for part in (sitemarkup.front_matter_text(metadata), text) if part.strip()
            )
            text = text if has_words(text) else str(metadata.get("title") or "")
        elif suffix in _TEXT_READERS:
            front: dict[str, Any] = {}
            page = suffix in (".html", ".htm")
            if page and text.startswith("---"):  # a generator's page template (Jekyll, Eleventy)
                front, text = _front_matter(path, text)
            metadata, text = _TEXT_READERS[suffix](path, text)
            if page:  # a template's or include's tags are never shown; an example of them in <pre> is
                text = _without_template_tags(text)
            metadata |= front
    files, own = sitemarkup.taken_in(text)
    if not has_words(own):
        if files:  # Sphinx's `.. include::`, a snippet: nothing here but what another file says
            raise _NoWords(
                f"{path}: only takes in {', '.join(files)[:300]} (a document never reads another file): "
                "ingest that file itself"
            )
        raise _NoWords(f"{path}: empty: no words to index (only white space, marks or markup)")
    if encoding != "utf-8":
        metadata["encoding"] = encoding
    title = str(metadata.pop("title", "") or _first_heading(text) or "")
    if "id" in metadata:
        doc_id = _own_id(str(metadata.pop("id")), doc_id)
    document = Document(id=doc_id, title=title, content=text.strip(), metadata=metadata, source=str(path))
    if not title:
        document.title, document.title_from_name = _name_as_title(path), True
    return [document]


def _read_at_most(file: IO[bytes], limit: int) -> bytes:
    """Up to `limit` bytes of a file, read in blocks: `read(limit)` would set aside `limit` bytes at once."""
    blocks: list[bytes] = []
    left = limit
    while left > 0 and (block := file.read(min(left, 2**20))):
        blocks.append(block)
        left -= len(block)
    return b"".join(blocks)


# Byte order marks, longest first (UTF-32's little-endian mark begins with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
MAX_CONTROL_SHARE = 0.05  # of a text's characters: more control characters than this is not text
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")  # control characters a text file does not hold ("\r" is gone)
MAX_LEGACY_MESS = 0.2  # charset-normalizer's mess ratio under which Windows-1252 reads a file cleanly


def _decoded(path: Path, data: bytes) -> tuple[str, str]:
    """A text file's text (line ends made "\n") and its encoding: a byte order mark's, else UTF-8, else
    Windows-1252 where it reads the bytes cleanly (most legacy Western text, which charset detection often
    takes for a Baltic or Central European code page), else what charset-normalizer finds. NUL bytes, a
    text of control characters, or bytes no encoding reads are refused by name as binary."""
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if encoding is None and b"\x00" in data:
        raise InvalidRequest(f"{path}: holds NUL bytes: a binary file, not text")
    try:
        text = data.decode(encoding or "utf-8")
        encoding = "utf-8" if encoding == "utf-8-sig" else encoding or "utf-8"
    except UnicodeDecodeError:
        if encoding is not None:
            raise InvalidRequest(f"{path}: not {encoding} text, though it begins with that mark") from None
        text, encoding = _legacy(path, data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    controls = len(_CONTROL.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        raise InvalidRequest(f"{path}: {controls:,} control characters: a binary file, not text")
    return text, encoding


def _legacy(path: Path, data: bytes) -> tuple[str, str]:
    from charset_normalizer import from_bytes
    from charset_normalizer.md import mess_ratio

    with contextlib.suppress(UnicodeDecodeError):
        text = data.decode("cp1252")
        if mess_ratio(text, MAX_LEGACY_MESS) <= MAX_LEGACY_MESS:
            return text, "cp1252"
    found = from_bytes(data).best()
    if found is None:
        raise InvalidRequest(f"{path}: no text encoding reads it: a binary file, not text")
    return str(found), found.encoding


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
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
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


def _own_id(written: str, path_id: str) -> str:
    """A front matter `id`, as Docusaurus reads it: the page's name within its folder (`id: issues` in
    maintenance/Issues.mdx is "maintenance/issues"), so that two folders' pages never share one and the later
    replace the earlier; an id holding "/" is the whole id, as written."""
    folder = path_id.rpartition("/")[0]
    return f"{folder}/{written}" if folder and "/" not in written else written


def _name_as_title(path: Path) -> str:
    """The title of a file that names none: its name, words apart (a source file's name as it is)."""
    if path.suffix.lower() in formats.CODE_LANGUAGES:
        return path.name
    return path.stem.replace("-", " ").replace("_", " ")


def _first_heading(text: str) -> str | None:
    """The words of the first top-level heading, else of the heading the page opens with (an mdBook
    section's page starts at "##"): its badges, images and link targets left out."""
    opening = None
    for line, code in formats.fenced(text.split("\n")):
        heading = None if code else formats.atx_heading(line)  # a comment line in code is no heading
        words = " ".join(_LINK.sub(r"\1", _IMAGE.sub("", heading[1])).split()) if heading else ""
        if heading and heading[0] == 1 and has_words(words):
            return words
        if opening is None and line.strip():
            opening = words if has_words(words) else ""
    return opening or None


# Markdown as a writer marks it up, made plain for search and for a model to read: setext headings become
# "#" headings (so the chunker splits there), backslash escapes ("Z\_OK") lose their backslash, and a
# permalink mark ending a heading ("¶") goes; code, fenced or inline, is left exactly as written.
# Each bracket and parenthesis run stops at the next opening mark too, so a search that fails from one "!["
# (a line of thousands of them) reads only up to the next, and a whole line is read a bounded number of times.
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_ESCAPE = re.compile(r"\\([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
_BACKTICKS = re.compile(r"`+")
_PERMALINK_MARKS = "¶§🔗"
_IMAGE = re.compile(r"!\[([^\[\]]*)\]\([^()]*\)")
_BADGE = re.compile(r"\[!\[[^\[\]]*\]\([^()]*\)\]\([^()]*\)")  # an image that links somewhere: a status badge
_LINK = re.compile(r"\[([^\[\]]*)\]\([^()]*\)")
_BLOCK_MARKS = ("#", "|", "-", "*", "+", ">", "=")  # a line starting with one is a block, not a paragraph


def tidy_markdown(text: str) -> str:
    """`text` with setext headings as "#" headings, backslash escapes resolved, permalink marks dropped and
    static-site markup read as its words (sitemarkup.py), outside code."""
    if "{" in text or ")=" in text:  # MyST's directives, roles and labels, before fences are told from prose
        text = myst.read(text, _eval_rst)
    read = sitemarkup.without_mdx_comments(formats.fenced(text.split("\n")))
    lines = sitemarkup.prose_lines(sitemarkup.api_references(read))
    out: list[str] = []
    terminal = False  # inside a `<div class="termy">`, whose fenced lines are shown as HTML
    for line, code in formats.fenced(lines):
        if code:
            out.append(
                sitemarkup.terminal_text(line) if terminal else sitemarkup.book_includes(line, code=True)
            )
            continue
        if line.strip() == "</div>":
            terminal = False
        elif sitemarkup.opens_terminal(line):
            terminal = True
        underline = _SETEXT.match(line)
        if underline and out and out[-1].strip() and not out[-1].lstrip().startswith(_BLOCK_MARKS):
            out[-1] = f"{'#' if underline.group(1)[0] == '=' else '##'} {out[-1].strip()}"
            continue
        shown = sitemarkup.block_line(line)  # an admonition's or tab's title; nothing for an import
        if shown is None:
            continue
        line = shown
        if line.lstrip().startswith("#"):  # a heading's images are badges and logos, not its words
            line = _IMAGE.sub("", _without_permalink(sitemarkup.without_attributes(line)))
        out.append(_unescaped(line))
    return "\n".join(out)


def _without_template_tags(page: str) -> str:
    """A page as read (its code fenced) without template tags outside its code, nor a line (a list item, a
    table row) that held nothing else."""
    kept = []
    for line, code in formats.fenced(page.split("\n")):
        shown = line if code else sitemarkup.without_template_tags(line)
        if shown == line or has_words(shown):
            kept.append(shown)
    return "\n".join(kept)


def _eval_rst(body: str) -> str:
    """A MyST `eval-rst` block as the reStructuredText reader renders it (as written if it cannot)."""
    try:
        return formats.rst_to_markdown(Path("eval-rst"), body)[1]
    except InvalidRequest:
        return body


def _unescaped(line: str) -> str:
    """A line's backslash escapes resolved, but inside `code` spans and where one keeps the line from
    starting a block ("\\# not a heading")."""
    indent = len(line) - len(line.lstrip())
    if line[indent : indent + 1] == "\\" and line[indent + 1 : indent + 2] in _BLOCK_MARKS:
        return line[: indent + 2] + _unescaped(line[indent + 2 :])
    if "`" in line and ("{{<" in line or "{{%" in line):  # a shortcode's parameter may hold inline code
        line = sitemarkup.shortcodes_outside(line, list(_code_spans(line)))
    parts, position = [], 0
    for start, end in _code_spans(line):
        parts += [_as_words(line[position:start]), line[start:end]]
        position = end
    return "".join([*parts, _as_words(line[position:])])


def _without_permalink(line: str) -> str:
    """A heading line without the permalink mark ("¶") that ends it."""
    kept = line.rstrip()
    unmarked = kept.rstrip(_PERMALINK_MARKS)
    return unmarked.rstrip() if unmarked != kept else line


def _code_spans(line: str) -> Iterator[tuple[int, int]]:
    """Where a line's `code` spans start and end: a run of backticks opens one, and the next run of the same
    length closes it (a run with no match is literal). Found from the runs in one pass each way, not by a
    pattern with a backreference, which is cubic on a line of backticks."""
    runs = [(run.start(), run.end()) for run in _BACKTICKS.finditer(line)]
    closer: dict[int, int] = {}  # a run's index -> the index of the next run as long
    # a length -> the index of the nearest run of it seen so far, from the right
    following: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        if length in following:
            closer[index] = following[length]
        following[length] = index
    index = 0
    while index < len(runs):
        if index in closer:
            yield runs[index][0], runs[closer[index]][1]
            index = closer[index] + 1
        else:
            index += 1


def _as_words(text: str) -> str:
    """Markdown outside code as words: escapes resolved, badges dropped, images as their alt text."""
    return _ESCAPE.sub(r"\1", sitemarkup.inline_words(_IMAGE.sub(r"\1", _BADGE.sub("", text))))


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
        if (count := len(reader.pages)) > MAX_PDF_PAGES:
            raise InvalidRequest(
                f"{path}: {count:,} pages, over the {MAX_PDF_PAGES:,} one PDF may have; split it into parts"
            )
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        title = str(reader.metadata.get("/Title") or "").strip() if reader.metadata else ""
    except InvalidRequest:
        raise
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
