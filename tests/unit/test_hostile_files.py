"""Files as an untrusted author (or a racing process) leaves them: each problem is an error naming the file
(and line), and with a `skipped` list a folder loads the rest and says which files it skipped and why.

The races are real: a file is deleted, or swapped for a symlink, between the folder's listing and its
reading (load_documents is a generator, so the test acts between two documents). Unreadable files are
real too: root reads 0444 and 0000 files anyway, so that test runs in a process without CAP_DAC_OVERRIDE.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import formats
from agent_retrieval.ingest.loaders import MAX_METADATA_CHARS, load_documents, load_file
from agent_retrieval.models import MAX_NESTING

REPO = Path(__file__).resolve().parents[2]


def billion_laughs(levels: int) -> str:
    """Front matter whose last key expands to 9**levels strings: a few hundred bytes of aliases to aliases."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "---\n" + "\n".join(lines) + "\n---\n# Laughs\n\nBody.\n"


def load(path: Path, **options) -> list:
    return list(load_documents([path], **options))


# --- YAML front matter ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        billion_laughs(6),
        "---\nbase: &base {owner: ops}\ncopy: *base\n---\nBody.\n",
        # an anchor alone expands nothing, but only exists for aliases
        "---\nsolo: &anchor value\n---\nBody.\n",
    ],
    ids=["billion-laughs", "alias", "anchor"],
)
def test_yaml_anchors_and_aliases_in_front_matter_are_refused_naming_the_file_and_line(tmp_path, text):
    path = tmp_path / "laughs.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"laughs\.md:2: front matter uses a YAML anchor") as err:
        load(path)
    assert "write each value out in full" in str(err.value)


def test_front_matter_nested_thousands_deep_names_the_file_and_line(tmp_path):
    path = tmp_path / "deep.md"
    path.write_text("---\ntitle: Deep\ntags: " + "[" * 5000 + "]" * 5000 + "\n---\nBody.\n", encoding="utf-8")
    with pytest.raises(
        InvalidRequest,
        match=rf"deep\.md:3: front matter is nested more than {MAX_NESTING} "
        "levels deep; flatten it",
    ):
        load(path)


def test_front_matter_at_the_nesting_limit_loads_and_one_level_more_is_refused(tmp_path):
    def nested(depth: int) -> str:  # the mapping of the front matter itself is the first level
        return "---\nx: " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n---\nBody.\n"

    (tmp_path / "ok.md").write_text(nested(MAX_NESTING), encoding="utf-8")
    (tmp_path / "deep.md").write_text(nested(MAX_NESTING + 1), encoding="utf-8")
    (doc,) = load(tmp_path / "ok.md")
    assert json.dumps(doc.metadata["x"]).count("[") == MAX_NESTING - 1
    with pytest.raises(InvalidRequest, match="nested more than"):
        load(tmp_path / "deep.md")


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("note: " + "x" * MAX_METADATA_CHARS, f"metadata is {MAX_METADATA_CHARS + 12:,} characters of JSON"),
        ("score: .nan", "metadata holds NaN or infinity"),
        ("limit: -.inf", "metadata holds NaN or infinity"),
        ('name: "a\\ud800b"', "metadata holds a lone surrogate"),
        ("bell: \x07", "odd.md:2: front matter is not valid YAML (special characters are not allowed)"),
        ("count: " + "9" * 5000, "front matter holds a value YAML cannot convert"),
        (
            "date: 2023-02-30",
            "front matter holds a value YAML cannot convert (day is out of range for month)",
        ),
    ],
)
def test_front_matter_that_cannot_be_stored_is_refused_naming_the_file(tmp_path, front, message):
    path = tmp_path / "odd.md"
    path.write_text(f"---\n{front}\n---\nBody.\n", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"odd\.md") as error:
        load(path)
    assert message in str(error.value)


# --- JSON lines ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"id": "b", "text": "t", "metadata": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
            f"records.jsonl:2: nested more than {MAX_NESTING} levels deep; flatten the record",
        ),
        (
            '{"id": "b", "text": "t", "metadata": {"x": ' + "[" * MAX_NESTING + "]" * MAX_NESTING + "}}",
            f"records.jsonl:2: nested more than {MAX_NESTING} levels deep",
        ),
        (
            '{"id": "b", "text": "t", "metadata": {"x": NaN}}',
            "records.jsonl:2: metadata holds NaN or infinity",
        ),
        (
            '{"id": "b", "text": "t", "metadata": {"note": "' + "x" * MAX_METADATA_CHARS + '"}}',
            "records.jsonl:2: metadata is",
        ),
        ('{"id": "b", "text": "half a pair \\ud800"}', "records.jsonl:2: holds a lone surrogate"),
        ('{"id": "b", "text": "t", "n": ' + "9" * 5000 + "}", "records.jsonl:2: not valid JSON (a number of"),
    ],
)
def test_hostile_jsonl_records_name_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "a", "text": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(InvalidRequest) as error:
        load(path)
    assert message in str(error.value)


def test_jsonl_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InvalidRequest, match=r"records\.jsonl:2: not UTF-8 text"):
        load(path)


def test_paired_surrogate_escapes_are_ordinary_text(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(
        '{"id": "a", "text": "a smile \\ud83d\\ude00 and a backslash-u \\\\ud800"}\n', encoding="utf-8"
    )
    (doc,) = load(path)
    assert doc.content == "a smile \U0001f600 and a backslash-u \\ud800"


def test_html_without_a_document_names_the_file_and_deep_nesting_loads(tmp_path):
    empty = tmp_path / "empty.html"
    empty.write_text("  \n", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"empty\.html: empty: no words to index"):  # as any empty file
        load_file(empty, "empty")
    deep = tmp_path / "deep.html"
    deep.write_text("<p>top</p>" + "<div>" * 100_000 + "deep" + "</div>" * 100_000, encoding="utf-8")
    assert load_file(deep, "deep")[0].id == "deep"  # the parser stops at its depth limit, no crash


def test_rst_cannot_read_other_files_or_pass_raw_markup_and_deep_nesting_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE", encoding="utf-8")
    page = tmp_path / "page.rst"
    page.write_text(
        f"Page\n====\n\nVisible.\n\n.. include:: {secret}\n\n.. raw:: html\n\n   <script>steal()</script>\n\n"
        f".. literalinclude:: {secret}\n\n.. csv-table::\n   :file: {secret}\n",
        encoding="utf-8",
    )
    content = load_file(page, "page")[0].content
    assert "Visible." in content and "TOP-SECRET" not in content and "steal" not in content
    deep = tmp_path / "deep.rst"
    deep.write_text("".join("  " * i + "- x\n\n" for i in range(3000)), encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"deep\.rst: not readable reStructuredText \(RecursionError\)"):
        load_file(deep, "deep")


@pytest.mark.parametrize("where", ["folder", "DOCUTILSCONFIG"])
def test_a_docutils_conf_cannot_turn_file_reading_back_on_or_make_docutils_write(
    tmp_path, monkeypatch, where
):
    """A cloned folder's own docutils.conf (read from the current directory), or one named by
    $DOCUTILSCONFIG, is the author's: docutils reads none, so nothing outside is read and nothing written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("TOP-SECRET-LINE", encoding="utf-8")
    victim = outside / "victim.txt"
    victim.write_text("KEEP-ME", encoding="utf-8")
    folder = tmp_path / "cloned"
    folder.mkdir()
    conf = folder / "docutils.conf"
    conf.write_text(
        f"[general]\nfile_insertion_enabled: yes\nraw_enabled: yes\nrecord_dependencies: {victim}\n",
        encoding="utf-8",
    )
    (folder / "page.rst").write_text(
        f"Page\n====\n\nVisible.\n\n.. include:: {secret}\n\n.. raw:: html\n   :file: {secret}\n",
        encoding="utf-8",
    )
    if where == "folder":
        monkeypatch.chdir(folder)
    else:
        monkeypatch.setenv("DOCUTILSCONFIG", str(conf))
    [page] = load(folder)
    assert "Visible." in page.content and "TOP-SECRET" not in page.content
    assert victim.read_text(encoding="utf-8") == "KEEP-ME"


def test_windows_line_ends_read_as_before(tmp_path):
    (tmp_path / "crlf.md").write_bytes(
        b"---\r\ntitle: Fees\r\nyear: 2024\r\n---\r\n# Fees\r\n\r\nSix per cent.\r\n"
    )
    (tmp_path / "crlf.jsonl").write_bytes(b'{"id": "a", "text": "one"}\r\n{"id": "b", "text": "two"}\r\n')
    md, a, b = load_documents([tmp_path / "crlf.md", tmp_path / "crlf.jsonl"])
    assert (md.title, md.metadata, md.content) == ("Fees", {"year": 2024}, "# Fees\n\nSix per cent.")
    assert (a.content, b.source) == ("one", f"{tmp_path / 'crlf.jsonl'}:2")


# --- files that vanish or cannot be read -------------------------------------------------------------


def three_notes(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b", "c"):
        (folder / f"{name}.md").write_text(f"# Note {name}\n\nText of {name}.\n", encoding="utf-8")
    return folder


def test_a_file_deleted_between_listing_and_reading_is_skipped_by_name_and_the_rest_load(tmp_path):
    folder = three_notes(tmp_path / "notes")
    skipped: list[str] = []
    documents = load_documents([folder], skipped=skipped)
    first = next(documents)  # the folder is listed, a.md read
    (folder / "b.md").unlink()
    assert [first.id, *(d.id for d in documents)] == ["a", "c"]
    assert skipped == [
        f"{folder / 'b.md'}: does not exist (deleted or moved while loading, or a symlink to "
        "nothing); nothing of it was loaded"
    ]


def test_without_a_skipped_list_the_first_bad_file_is_the_error(tmp_path):
    folder = three_notes(tmp_path / "notes")
    documents = load_documents([folder])
    next(documents)
    (folder / "b.md").unlink()
    with pytest.raises(InvalidRequest, match=r"b\.md: does not exist"):
        next(documents)


def test_a_folder_ingest_skips_each_bad_file_with_its_reason(tmp_path):
    folder = three_notes(tmp_path / "notes")
    (folder / "laughs.md").write_text(billion_laughs(6), encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.jsonl").write_text('{"id": "x", "text": ' + "[" * 3000 + "]" * 3000 + "}\n")
    (folder / "gone.md").symlink_to(folder / "nowhere.md")
    skipped: list[str] = []
    assert [d.id for d in load_documents([folder], skipped=skipped)] == ["a", "b", "c"]
    assert [line.split(": ", 1)[0] for line in skipped] == [
        str(folder / name) for name in ("gone.md", "laughs.md:2", "sub/deep.jsonl:1")
    ]
    assert "anchor or alias" in skipped[1] and "nested more than" in skipped[2]


def test_a_pipe_named_like_a_document_is_refused_without_waiting_for_a_writer(tmp_path):
    """Opening a pipe for reading blocks until something writes: the load runs in a thread, and if it is still
    waiting after 30 s the test opens the pipe's other end to free it, then fails."""
    folder = three_notes(tmp_path / "notes")
    os.mkfifo(folder / "pipe.md")
    skipped: list[str] = []
    loaded: list[str] = []

    def load_folder() -> None:
        loaded.extend(d.id for d in load_documents([folder], skipped=skipped))

    worker = threading.Thread(target=load_folder, daemon=True)
    worker.start()
    worker.join(30)
    waited = worker.is_alive()
    if waited:
        os.close(os.open(folder / "pipe.md", os.O_WRONLY | os.O_NONBLOCK))
        worker.join()
    assert not waited, "the load waited for a writer on pipe.md"
    assert loaded == ["a", "b", "c"]
    assert skipped == [
        f"{folder / 'pipe.md'}: not a regular file (a pipe, socket or device); only files are loaded"
    ]


UNREADABLE_SCRIPT = """
import json, sys
from agent_retrieval.ingest.loaders import load_documents
skipped = []
ids = [d.id for d in load_documents([sys.argv[1]], skipped=skipped)]
print(json.dumps({"ids": ids, "skipped": skipped}))
"""


def test_unreadable_files_and_folders_are_skipped_by_name_and_the_rest_load(tmp_path):
    folder = three_notes(tmp_path / "notes")
    three_notes(folder / "locked")
    (folder / "b.md").chmod(0o000)
    (folder / "locked").chmod(0o000)
    command = [sys.executable, "-c", UNREADABLE_SCRIPT, str(folder)]
    if os.geteuid() == 0:  # root reads a 0000 file anyway; without CAP_DAC_OVERRIDE the mode binds it
        if not shutil.which("setpriv"):
            pytest.skip("running as root needs setpriv to drop CAP_DAC_OVERRIDE")
        caps = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *command]
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    finally:
        (folder / "b.md").chmod(0o644)
        (folder / "locked").chmod(0o755)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ids"] == ["a", "c"]
    assert out["skipped"] == [
        f"{folder / 'locked'}: cannot be listed (Permission denied); check its permissions, then load it "
        "again",
        f"{folder / 'b.md'}: cannot be read (Permission denied); check its permissions, then load it again",
    ]


# --- confinement to a root folder ------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/docs holds a note, a symlink to a note elsewhere inside root, and two symlinks out of root."""
    root = tmp_path / "root"
    three_notes(root / "docs")
    three_notes(root / "shared")
    secret = three_notes(tmp_path / "outside")
    (secret / "secret.md").write_text("# Secret\n\nThe server's private notes.\n", encoding="utf-8")
    (root / "docs" / "linked.md").symlink_to(root / "shared" / "a.md")
    (root / "docs" / "escape.md").symlink_to(secret / "secret.md")
    (root / "docs" / "escape-folder").symlink_to(secret)
    return tmp_path


def test_with_a_root_symlinks_out_of_it_are_refused_by_name_and_the_rest_load(tree, monkeypatch):
    root, docs = tree / "root", tree / "root" / "docs"
    opened: list[str] = []
    real_open = os.open

    def recording_open(name, flags, *args, **kwargs):
        opened.append(os.path.realpath(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    skipped: list[str] = []
    loaded = list(load_documents([docs], root=root, skipped=skipped))
    monkeypatch.undo()
    assert [d.id for d in loaded] == ["a", "b", "c", "linked"]
    assert "private" not in " ".join(d.content for d in loaded)
    assert opened and all(Path(name).is_relative_to(root) for name in opened)  # not even opened outside
    assert skipped == [
        f"{docs / name}: leads outside {root}; refused: only files inside {root} may be "
        "loaded (symlinks resolved)"
        for name in ("escape-folder", "escape.md")
    ]
    with pytest.raises(InvalidRequest, match=r"escape-folder: leads outside"):
        list(load_documents([docs], root=root))


@pytest.mark.parametrize(
    "given",
    [
        "outside/secret.md",
        "root/docs/escape.md",
        "root/docs/../../outside",
        "root/docs/escape-folder",
        "outside/absent.md",
    ],
)
def test_with_a_root_a_path_outside_it_is_refused_naming_it(tree, given):
    with pytest.raises(InvalidRequest, match="leads outside") as error:
        list(load_documents([tree / given], root=tree / "root", skipped=[]))
    assert str(error.value).startswith(f"{tree / given}: ")


def test_a_root_reached_through_a_symlink_confines_the_same_files(tree):
    (tree / "root-link").symlink_to(tree / "root")
    real, link = tree / "root", tree / "root-link"
    for root, given in [(link, real / "docs"), (real, link / "docs")]:
        skipped: list[str] = []
        loaded = load_documents([given], root=root, skipped=skipped)
        assert [d.id for d in loaded] == ["a", "b", "c", "linked"]
        assert len(skipped) == 2


def test_a_file_swapped_for_a_symlink_out_of_root_after_listing_is_refused(tree):
    docs = tree / "root" / "docs"
    skipped: list[str] = []
    documents = load_documents([docs], root=tree / "root", skipped=skipped)
    first = next(documents)  # listed: b.md is still a plain file inside root
    (docs / "b.md").unlink()
    (docs / "b.md").symlink_to(tree / "outside" / "secret.md")
    rest = list(documents)
    assert [first.id, *(d.id for d in rest)] == ["a", "c", "linked"]
    assert "private" not in " ".join(d.content for d in rest)
    named = [line.split(": ", 1)[0] for line in skipped]
    assert named == [str(docs / name) for name in ("escape-folder", "b.md", "escape.md")]
    assert "leads outside" in skipped[1]


def test_a_file_swapped_between_the_check_and_the_open_is_refused(tree, monkeypatch):
    """The race the check after opening is for: b.md is inside root when checked, and a symlink out of it by
    the time it is opened (the swap is made, for real, just before the open)."""
    docs, real_open = tree / "root" / "docs", os.open

    def swap_then_open(name, flags, *args, **kwargs):
        if str(name) == str(docs / "b.md"):
            (docs / "b.md").unlink()
            (docs / "b.md").symlink_to(tree / "outside" / "secret.md")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    skipped: list[str] = []
    loaded = list(load_documents([docs / "b.md", docs / "a.md"], root=tree / "root", skipped=skipped))
    monkeypatch.undo()
    assert [d.id for d in loaded] == ["a"] and "private" not in loaded[0].content
    assert skipped == [
        f"{docs / 'b.md'}: leads outside {tree / 'root'}; refused: only files inside "
        f"{tree / 'root'} may be loaded (symlinks resolved)"
    ]


def test_without_a_root_a_folder_confines_its_symlinks_unless_told_to_follow_them(tree):
    docs, skipped = tree / "root" / "docs", []
    assert [d.id for d in load_documents([docs], skipped=skipped)] == ["a", "b", "c"]
    assert [line.split(": ")[0] for line in skipped] == [
        str(docs / n) for n in ("escape-folder", "escape.md", "linked.md")
    ]
    assert all(f": leads outside {docs};" in line for line in skipped)
    ids = [d.id for d in load_documents([docs], follow_symlinks=True)]
    assert ids == ["a", "b", "c", "escape", "linked"]
    assert [d.id for d in load_documents([docs / "escape.md"])] == ["escape"]  # a file named is read


def test_rst_that_docutils_would_read_for_minutes_is_stopped_at_a_time_linear_in_its_size(
    tmp_path, monkeypatch
):
    """Who sets it: a document's author. What bounds it: docutils is stopped after RST_SECONDS +
    RST_SECONDS_PER_CHAR a character (worker.run_within). 480 KB of comments took four minutes; here the
    budget is made small so the test is quick."""
    monkeypatch.setattr(formats, "RST_SECONDS", 0.2)
    monkeypatch.setattr(formats, "RST_SECONDS_PER_CHAR", 1e-6)
    page = tmp_path / "comments.rst"
    page.write_text("Title\n=====\n\n" + ".. \n\n" * 40_000, encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"comments\.rst: docutils could not read .* within 0\.4 s"):
        load_file(page, "comments")
    monkeypatch.undo()  # the shipped budget: real pages of that size read within it, the slowest one too
    fine = tmp_path / "fine.rst"
    fine.write_text("Title\n=====\n\n" + "A sentence about valves.\n\n" * 2_000, encoding="utf-8")
    assert "valves" in load_file(fine, "fine")[0].content
    slowest = load_file(REPO / "tests" / "data" / "real" / "sphinx-deprecated.rst", "deprecated")[0]
    assert "sphinx.util.FilenameUniqDict" in slowest.content


def test_the_rst_deadline_counts_the_works_own_time_not_what_a_busy_machine_gives_others():
    """The deadline is this thread's CPU time: waiting while other processes (a test suite's, a server's
    other requests) have the cores costs the document nothing; working does."""
    from agent_retrieval.ingest import worker

    def waits_then_reads() -> str:
        time.sleep(0.3)  # no work of this thread's: the machine busy elsewhere
        return "".join(json.dumps({"read": True}) for _ in range(100))  # calls into a watched module

    def works_then_reads() -> str:
        started = time.thread_time()
        while time.thread_time() - started < 0.3:
            pass
        return "".join(json.dumps({"read": True}) for _ in range(100))

    assert worker.run_within(waits_then_reads, (), 0.1, modules=("json",)) == '{"read": true}' * 100
    with pytest.raises(worker.Overtime):
        worker.run_within(works_then_reads, (), 0.1, modules=("json",))


FIRST_READ_SCRIPT = """
import json, sys
from pathlib import Path
from agent_retrieval.ingest import formats, worker
timed, imported = worker.run_within, []
def watched(function, args, seconds, *, modules):
    before = set(sys.modules)
    try:
        return timed(function, args, seconds, modules=modules)
    finally:
        imported.extend(sorted(set(sys.modules) - before))
worker.run_within = watched
for page in sys.argv[1:]:
    formats.rst_to_markdown(Path(page), Path(page).read_text(encoding="utf-8"))
print(json.dumps(imported))
"""


def test_a_process_first_rst_page_is_timed_for_its_text_not_for_loading_docutils():
    """The deadline above is the text's: docutils' imports at a process's first page and at each
    directive's first use (ten times a page's reading) happen before the clock starts, so a real page read
    by a busy machine's fresh process is not stopped for them (nor Pygments' lexers: code is not
    highlighted). A fresh interpreter reads real pages holding notes, code blocks and version notes; no
    module is imported while the clock runs."""
    pages = sorted(str(page) for page in (REPO / "tests" / "data" / "real").glob("sphinx-*.rst"))
    done = subprocess.run(
        [sys.executable, "-c", FIRST_READ_SCRIPT, *pages],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert json.loads(done.stdout) == []
