"""Files as an untrusted author leaves them: each problem is an error naming the file (and line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import MAX_METADATA_CHARS, load_documents
from agent_retrieval.models import MAX_NESTING


def billion_laughs(levels: int) -> str:
    """Front matter whose last key expands to 9**levels strings: a few hundred bytes of aliases to aliases."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "---\n" + "\n".join(lines) + "\n---\n# Laughs\n\nBody.\n"


def load(path: Path, **options) -> list:
    return list(load_documents([path], **options))


# --- YAML front matter ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    billion_laughs(6),
    "---\nbase: &base {owner: ops}\ncopy: *base\n---\nBody.\n",
    "---\nsolo: &anchor value\n---\nBody.\n",  # an anchor alone expands nothing, but only exists for aliases
], ids=["billion-laughs", "alias", "anchor"])
def test_yaml_anchors_and_aliases_in_front_matter_are_refused_naming_the_file_and_line(tmp_path, text):
    path = tmp_path / "laughs.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"laughs\.md:2: front matter uses a YAML anchor or alias") as error:
        load(path)
    assert "write each value out in full" in str(error.value)


def test_front_matter_nested_thousands_deep_names_the_file_and_line(tmp_path):
    path = tmp_path / "deep.md"
    path.write_text("---\ntitle: Deep\ntags: " + "[" * 5000 + "]" * 5000 + "\n---\nBody.\n", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=rf"deep\.md:3: front matter is nested more than {MAX_NESTING} "
                                             "levels deep; flatten it"):
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


@pytest.mark.parametrize(("front", "message"), [
    ("note: " + "x" * MAX_METADATA_CHARS, f"metadata is {MAX_METADATA_CHARS + 12:,} characters of JSON, over"),
    ("score: .nan", "metadata holds NaN or infinity"),
    ("limit: -.inf", "metadata holds NaN or infinity"),
    ('name: "a\\ud800b"', "metadata holds a lone surrogate"),
    ("bell: \x07", "odd.md:2: front matter is not valid YAML (special characters are not allowed)"),
    ("count: " + "9" * 5000, "front matter holds a value YAML cannot convert"),
    ("date: 2023-02-30", "front matter holds a value YAML cannot convert (day is out of range for month)"),
])
def test_front_matter_that_cannot_be_stored_is_refused_naming_the_file(tmp_path, front, message):
    path = tmp_path / "odd.md"
    path.write_text(f"---\n{front}\n---\nBody.\n", encoding="utf-8")
    with pytest.raises(InvalidRequest, match="odd.md") as error:
        load(path)
    assert message in str(error.value)


# --- JSON lines ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "b", "text": "t", "metadata": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
     f"records.jsonl:2: nested more than {MAX_NESTING} levels deep; flatten the record"),
    ('{"id": "b", "text": "t", "metadata": {"x": ' + "[" * MAX_NESTING + "]" * MAX_NESTING + "}}",
     f"records.jsonl:2: nested more than {MAX_NESTING} levels deep"),
    ('{"id": "b", "text": "t", "metadata": {"x": NaN}}', "records.jsonl:2: metadata holds NaN or infinity"),
    ('{"id": "b", "text": "t", "metadata": {"note": "' + "x" * MAX_METADATA_CHARS + '"}}',
     "records.jsonl:2: metadata is"),
    ('{"id": "b", "text": "half a pair \\ud800"}', "records.jsonl:2: holds a lone surrogate"),
    ('{"id": "b", "text": "t", "n": ' + "9" * 5000 + "}", "records.jsonl:2: not valid JSON (a number of more"),
])
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
    path.write_text('{"id": "a", "text": "a smile \\ud83d\\ude00 and a backslash-u \\\\ud800"}\n', encoding="utf-8")
    (doc,) = load(path)
    assert doc.content == "a smile \U0001f600 and a backslash-u \\ud800"


def test_html_that_the_parser_rejects_names_the_file(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("<html><body><![foo[ a marked section ]]><p>Text</p></body></html>", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"page\.html: not readable HTML \(unknown status keyword 'foo'"):
        load(path)


def test_windows_line_ends_read_as_before(tmp_path):
    (tmp_path / "crlf.md").write_bytes(b"---\r\ntitle: Fees\r\nyear: 2024\r\n---\r\n# Fees\r\n\r\nSix per cent.\r\n")
    (tmp_path / "crlf.jsonl").write_bytes(b'{"id": "a", "text": "one"}\r\n{"id": "b", "text": "two"}\r\n')
    md, a, b = load_documents([tmp_path / "crlf.md", tmp_path / "crlf.jsonl"])
    assert (md.title, md.metadata, md.content) == ("Fees", {"year": 2024}, "# Fees\n\nSix per cent.")
    assert (a.content, b.source) == ("one", f"{tmp_path / 'crlf.jsonl'}:2")
