"""Hostile input, property by property, on the embedded store: whatever the tools and the store's read methods
are given (search syntax, SQL, NUL, lone surrogates, megabyte strings, JSON nested a thousand deep, numbers
out of every range), they answer with a validated result or an error naming the argument, and change nothing.

Most examples make one argument hostile and keep the others valid, so an error can be held to naming that
argument and an all-valid call to succeeding. The strategies and checks are reused by the Postgres and
Supabase tests in tests/integration/test_hostile_input_sql.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.core.text import keyword_terms
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import WordHashEmbeddings

# Every example only reads the shared store, so the function-scoped autouse fixture is harmless here.
# No explain phase: on a failure it reruns hundreds of variants, minutes on the Postgres tests.
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    phases=set(Phase) - {Phase.explain},
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# --- what hostile input is made of ---------------------------------------------------------------------

FTS5 = [
    '"',
    '""',
    "NEAR(",
    "NEAR(deposit lane, 2)",
    "*",
    "dep*",
    "^deposit",
    "AND",
    "OR",
    "NOT",
    "title:",
    "content:",
    "heading_path:",
    "every_row:",
    "{title content}:",
    "- {every_row} :",
    "(",
    ")",
    "+",
    "-",
    "zzagentretrievaleveryrow",
    "ZZAGENTRETRIEVALEVERYROWS",
]
TSQUERY = ["&", "|", "!", "<->", "<2>", ":*", ":A", "!!", "'", "deposit & !lane", "(a | b) <-> c:*"]
SQL = [
    "'; drop table documents; --",
    "' or 1=1 --",
    '" or ""="',
    "$$; delete from chunks; $$",
    "/*",
    "*/",
    "\\",
    "%",
    "_",
    "';--",
    "'); DROP TABLE chunks_fts; --",
]
ODD = [
    "\x00",
    "\ud800",
    "\udfff",
    "\udc80abc",
    "\u202e",
    "\u200b",
    "\ufeff",
    "🔥",
    "👨‍👩‍👧",
    "日本語",
    "東京",
    "مرحبا بالعالم",
    "שלום",
    "ß",
    "dépôt",
    "İ",
    "\t",
    "\n",
    "\r\n",
    " ",
    "\u3000",
    "\u0301",
]
WORDS = [
    "deposit",
    "tenancy",
    "Banda",
    "lane",
    "commission",
    "referral",
    "fee",
    "policy",
    "the",
    "and",
    "of",
    "2024",
    "£2,100",
    "Halden",
]
FRAGMENTS = FTS5 + TSQUERY + SQL + ODD + WORDS


def valid_text(text: str) -> bool:
    """Text a UTF-8 database can hold: no NUL, no lone surrogate (the rule of every text argument)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


# Fragments run together ("dep*NEAR(") or stand as words of their own ("dep* NEAR(").
small_text = st.builds(
    lambda parts, sep: sep.join(parts),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=14),
    st.sampled_from(["", " ", " "]),
)
# A megabyte costs nothing to generate when it is one fragment repeated.
megabyte = st.sampled_from(FRAGMENTS).map(lambda f: (f + " ") * (1_000_000 // (len(f) + 1)))
hostile_text = st.one_of(small_text, megabyte, st.sampled_from(["", " ", "\t\n", "\u3000"]))
# What a model could send as a query: at most 4000 characters of text, not blank.
clean_query = st.builds(
    lambda parts, sep: sep.join(parts),
    st.lists(
        st.one_of(
            st.sampled_from([f for f in FRAGMENTS if valid_text(f)]), st.text(max_size=6).filter(valid_text)
        ),
        min_size=1,
        max_size=14,
    ),
    st.sampled_from(["", " ", " "]),
).filter(lambda q: q.strip() and len(q) <= 4000)


def nest(depth: int, kind: str, leaf: Any = "x") -> Any:
    """`leaf` inside `depth` dicts or lists, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value} if kind == "dict" else [value]
    return value


deep = st.builds(nest, st.integers(30, 1200), st.sampled_from(["dict", "list"]))
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 10**12, -(10**12), 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, hostile_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=8,
)
anything = st.one_of(json_values, deep)  # a value of every JSON type, or one nested up to 1200 deep

FILTER_VALUES = [
    "policy",
    "guide",
    "property",
    "notice",
    "procedure",
    2021,
    2024,
    "2024",
    2024.0,
    "Halden & Rowe Estates",
    "14 Banda Lane",
    "'; drop table documents; --",
    "日本語",
    "NEAR(",
    True,
    0,
    -1,
    1.5,
    -(2**63),
    2**63 - 1,
]
filter_value = st.sampled_from(FILTER_VALUES)
valid_filters = st.one_of(
    st.none(),
    st.just({}),
    st.dictionaries(
        st.sampled_from(["category", "year", "entity", "missing_key", "a-b", "_x"]),
        st.one_of(filter_value, st.lists(filter_value, min_size=1, max_size=3)),
        min_size=1,
        max_size=2,
    ),
)
filter_keys = st.one_of(
    st.sampled_from(
        [
            "category",
            "year",
            "x" * 64,
            "x" * 65,
            "",
            "bad key;",
            'a"b',
            "$.a",
            "1abc",
            "\ud800",
            "日本",
            "a.b",
            "a'b",
        ]
    ),
    st.text(max_size=8),
)
hostile_filters = st.one_of(
    anything,
    st.dictionaries(filter_keys, st.one_of(filter_value, anything), min_size=1, max_size=4),
    st.dictionaries(st.sampled_from(["category", "year"]), st.lists(anything, max_size=3), min_size=1),
    st.dictionaries(
        st.one_of(st.integers(), st.booleans(), st.none(), st.floats()), filter_value, min_size=1, max_size=2
    ),
    st.dictionaries(st.text(min_size=1, max_size=3), filter_value, min_size=17, max_size=20),  # too many keys
)
counts = st.one_of(
    st.integers(-(10**13), 10**13),
    st.sampled_from([0, -1, 10**12, 2**64, True, False, 1.0, 1.5, "3"]),
    anything,
)
levels = st.one_of(st.sampled_from(["documents_fts", "chunks; --", "", "Documents", "chunks "]), anything)
hostile_ids = st.one_of(
    st.lists(hostile_text, min_size=1, max_size=4),
    hostile_text,
    anything,
    st.lists(st.one_of(st.integers(), st.none(), st.booleans()), min_size=1, max_size=2),
    st.integers(1, 3).map(lambda n: ["x"] * (10_000 + n)),
)  # more ids than allowed


def valid_id(text: str) -> bool:
    """An id every entry point takes: 1 to 512 characters of valid text, not blank."""
    return 1 <= len(text) <= 512 and valid_text(text) and bool(text.strip())


def unknown_ids() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(min_size=1, max_size=40).filter(valid_id),
        st.sampled_from([f for f in FRAGMENTS if valid_id(f)]),
        st.just("x" * 512),
    )


def one_bad(data: st.DataObject, valid: dict[str, Any], hostile: dict[str, Any]) -> tuple[str | None, dict]:
    """Arguments: valid ones but for one drawn from its hostile strategy (or none hostile, or all)."""
    bad = data.draw(st.sampled_from([None] * (1 + len(hostile) // 3) + ["all", *hostile]), label="hostile")
    args = {
        name: data.draw(hostile[name] if bad in (name, "all") else strategy, label=name)
        for name, strategy in valid.items()
    }
    return bad, args


# --- checking what came back ---------------------------------------------------------------------------

NUMBER = re.compile(r"-?\d{1,15}|-?\d{0,15}\.\d{1,15}")


def loose(value: Any) -> Any:
    """Values a filter treats as equal compare equal here: numbers and their text forms."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, str) and NUMBER.fullmatch(value):
        return ("number", float(value))
    return ("text", value)


def metadata_matches(metadata: dict[str, Any], filters: dict[str, Any] | None) -> bool:
    for key, wanted in (filters or {}).items():
        allowed = {loose(v) for v in (wanted if isinstance(wanted, list) else [wanted])}
        if key not in metadata or loose(metadata[key]) not in allowed:
            return False
    return True


ARGUMENT_NAMES = (
    "query",
    "query_type",
    "top_k",
    "filters",
    "document_ids",
    "hyde",
    "input_schema",
    "output_schema",
    "level",
    "k",
    "limit",
    "ids",
    "vector",
    "min_similarity",
)
LEAKS = (
    "Traceback",
    "sqlite3",
    "OperationalError",
    "IntegrityError",
    "psycopg",
    "postgrest",
    "APIError",
    "RecursionError",
    "UnicodeEncodeError",
    "OverflowError",
    "SELECT ",
    "select ",
    "(unknown)",
    "not installed",
)


def assert_readable(message: str, argument: str | None = None) -> None:
    """An error for a person (or a model): names the argument (that one, when known), shows no internals."""
    names = (*ARGUMENT_NAMES, "unexpected", "1") if argument in (None, "all") else (argument,)
    assert any(re.search(rf"(^|\W){name}\b", message) for name in names), (argument, message[:300])
    assert not any(leak in message for leak in LEAKS), message[:300]
    assert len(message) < 2000, message[:300]


def accepted_scope(level: Any, k: Any, ids: Any, maximum: int = 1000) -> bool:
    """What a store search accepts, stated independently of the code under test."""
    return (
        level in ("documents", "chunks")
        and type(k) is int
        and 1 <= k <= maximum
        and (
            ids is None
            or (
                isinstance(ids, list)
                and len(ids) <= 10_000
                and all(isinstance(i, str) and valid_id(i) for i in ids)
            )
        )
    )


def check_hits(
    hits: list[dict[str, Any]],
    corpus: dict[str, Any],
    level: str,
    *,
    top_k: int,
    filters: dict[str, Any] | None = None,
    document_ids: list[str] | None = None,
) -> None:
    """Hits are stored rows of the right level, each once, at most top_k, within the filters and the scope."""
    assert len(hits) <= top_k
    assert len({h["id"] for h in hits}) == len(hits)
    for hit in hits:
        assert hit["level"] == level
        assert hit["id"] in corpus["documents" if level == "documents" else "chunks"]
        assert hit["document_id"] in corpus["documents"]
        assert metadata_matches(corpus["documents"][hit["document_id"]], filters), (hit["metadata"], filters)
        if document_ids is not None:
            assert hit["document_id"] in document_ids


def keyword_words(query: str) -> str:
    """The words keyword search looks for, as text for a tokenizer."""
    return " ".join(keyword_terms(query))


def call(tool, args: Any) -> ToolMessage:
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


# --- the shared store ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def retrieval(tmp_path_factory: pytest.TempPathFactory):
    """One demo store for the whole module: every test here only reads it."""
    context = Context(db_path=str(tmp_path_factory.mktemp("hostile") / "store.db"))
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest(load_documents([demo.corpus_dir()]), retrieval.store, embedder, context, progress=False)
        yield retrieval


@pytest.fixture(scope="module")
def corpus(retrieval) -> dict[str, Any]:
    """What is stored, read directly: ids, metadata, and the indexed words of every row's text columns."""
    path = retrieval.context.store.db_path
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        documents = {i: json.loads(m) for i, m in conn.execute("SELECT id, metadata FROM documents")}
        chunks = {i: (d, o) for i, d, o in conn.execute("SELECT id, document_id, ordinal FROM chunks")}
        words: dict[str, dict[str, set[str]]] = {}
        for level, text_columns in (
            ("documents", ("title", "content")),
            ("chunks", ("heading_path", "content")),
        ):
            conn.execute(
                f"CREATE VIRTUAL TABLE temp.{level}_vocab USING fts5vocab(main, {level}_fts, instance)"
            )
            words[level] = {}
            for row_id, term in conn.execute(
                f"""SELECT t.id, v.term FROM temp.{level}_vocab v
                                                 JOIN {level} t ON t.rowid = v.doc WHERE v.col IN (?, ?)""",
                text_columns,
            ):
                words[level].setdefault(row_id, set()).add(term)
    return Corpus(path=path, documents=documents, chunks=chunks, words=words)


class Corpus(dict):
    """The stored rows, with a short repr for Hypothesis's failure reports."""

    def __repr__(self) -> str:
        return f"Corpus({len(self['documents'])} documents, {len(self['chunks'])} chunks)"


def fingerprint(path: str) -> str:
    """A hash of every row of every table (the FTS index's own tables too) and the schema version."""
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        assert {"documents", "chunks", "store_info", "chunks_fts_data"} <= set(tables)
        for table in tables:
            digest.update(
                repr((table, conn.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall())).encode()
            )
        digest.update(repr(conn.execute("PRAGMA user_version").fetchone()).encode())
    return digest.hexdigest()


@pytest.fixture
def unchanged(corpus):
    """After the test (all its examples), the database is exactly as before it."""
    before = fingerprint(corpus["path"])
    yield
    assert fingerprint(corpus["path"]) == before, "a read changed the database"


def stems(text: str) -> set[str]:
    """The words FTS5 indexes for `text`, with the store's tokenizer (porter, unicode61, no diacritics)."""
    with sqlite3.connect(":memory:") as conn:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        conn.execute("INSERT INTO t (x) VALUES (?)", (text,))
        return {r[0] for r in conn.execute("SELECT term FROM v")}


@pytest.fixture(scope="module")
def tools(retrieval):
    names = ["document_retriever", "chunk_retriever", "similarity_search"]
    return dict(zip(names, make_retrieval_tools(retrieval=retrieval, names=names), strict=True))


# --- the tools -----------------------------------------------------------------------------------------


def tool_strategies(documents: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Valid and hostile values of every argument a tool takes."""
    known = st.lists(st.sampled_from(documents), min_size=1, max_size=4, unique=True)
    small_schema = st.dictionaries(
        st.sampled_from(["type", "properties", "title"]),
        st.sampled_from(["object", "string", {"a": {"type": "string"}}]),
        max_size=2,
    )
    valid = {
        "query": clean_query,
        "query_type": st.sampled_from(["general", "exact", "conceptual"]),
        "top_k": st.integers(1, 50),
        "filters": valid_filters,
        "document_ids": st.one_of(st.none(), known),
        "hyde": st.sampled_from(["auto", "off", "passages", "schema"]),
        "input_schema": st.one_of(st.none(), small_schema),
        "output_schema": st.one_of(st.none(), small_schema),
    }
    hostile = {
        "query": st.one_of(hostile_text, anything),
        "query_type": st.one_of(
            st.sampled_from(["summarize", "", "GENERAL", "general "]), hostile_text, anything
        ),
        "top_k": st.one_of(counts, st.sampled_from([51, 2.0, 2.5, "5", "five", None])),
        "filters": hostile_filters,
        "document_ids": st.one_of(
            hostile_ids,
            st.just([]),
            st.just(documents * 9),  # 108 ids: over 100
            st.lists(unknown_ids(), min_size=1, max_size=3),
        ),
        "hyde": st.one_of(st.sampled_from(["AUTO", "on", ""]), anything),
        "input_schema": st.one_of(anything, st.just({"a": "x" * 20_001})),
        "output_schema": anything,
    }
    return valid, hostile


TAKES = {
    "document_retriever": (
        "query",
        "query_type",
        "top_k",
        "filters",
        "hyde",
        "input_schema",
        "output_schema",
    ),
    "chunk_retriever": (
        "query",
        "query_type",
        "top_k",
        "filters",
        "document_ids",
        "hyde",
        "input_schema",
        "output_schema",
    ),
    "similarity_search": ("query", "top_k", "filters"),
}


def draw_tool_call(
    data: st.DataObject, documents: list[str], names: list[str]
) -> tuple[str, str | None, dict]:
    """A tool, its arguments with one hostile (or none, or all), sometimes plus one it does not take."""
    name = data.draw(st.sampled_from(names), label="tool")
    valid, hostile = tool_strategies(documents)
    takes = TAKES[name]
    bad, args = one_bad(data, {k: valid[k] for k in takes}, {k: hostile[k] for k in takes})
    args = {k: v for k, v in args.items() if v is not None or k == bad}  # leave most defaults out
    if data.draw(st.integers(0, 9), label="extra") == 0:
        extra = data.draw(
            st.sampled_from(["unexpected", "document_ids", "k", 1, "query_type"]), label="extra name"
        )
        if extra not in args:  # an argument of another tool is one this tool does not take
            args[extra] = data.draw(anything, label="extra value")
            bad = "all" if bad is not None else extra if extra in takes else "extra"
    return name, bad, args


def check_tool_answer(result: ToolMessage, name: str, bad: str | None, args: dict, corpus: dict) -> None:
    """A validated result within the arguments' bounds, or an error naming the hostile argument."""
    assert isinstance(result, ToolMessage) and result.status in ("success", "error")
    event(f"{result.status}{'' if result.status == 'success' else f' ({bad})'}")
    if result.status == "error":
        assert bad is not None, f"valid arguments refused: {result.content}"
        if bad == "extra":
            assert re.search(
                r": (is not an argument of this tool|Keys should be strings|nested more than)", result.content
            ), result.content
        elif bad == "query_type" and "summarize' returns" in result.content:  # summarize takes no filters
            assert_readable(result.content, "filters")
        elif bad == "query_type" and "required when query_type is 'summarize'" in result.content:
            assert_readable(result.content, "document_ids")
        else:
            assert_readable(result.content, bad)
        return
    artifact = result.artifact
    summary = artifact["query_type"] == "summarize"
    check_hits(
        artifact["hits"],
        corpus,
        "documents" if name == "document_retriever" else "chunks",
        top_k=10**6 if summary else int(float(args.get("top_k", 5))),
        filters=args.get("filters"),
        document_ids=args.get("document_ids"),
    )
    assert json.loads(json.dumps(artifact))["query_type"] in ("general", "exact", "conceptual", "summarize")
    # What was accepted was valid: a query of text, a whole top_k in range.
    assert isinstance(args["query"], str) and valid_text(args["query"]) and len(args["query"]) <= 4000
    assert "top_k" not in args or (type(args["top_k"]) is int and 1 <= args["top_k"] <= 50)


@SETTINGS
@given(data=st.data())
def test_every_tool_answers_any_arguments_with_bounded_hits_or_an_error_naming_the_argument(
    tools, corpus, unchanged, data
):
    name, bad, args = draw_tool_call(data, sorted(corpus["documents"]), sorted(tools))
    check_tool_answer(call(tools[name], args), name, bad, args, corpus)


@SETTINGS
@given(query=st.one_of(clean_query, hostile_text), top_k=st.integers(1, 50))
@example(query="ZZAGENTRETRIEVALEVERYROWS", top_k=50)  # the FTS index's every-row marker, stemmed
@example(query='NEAR(dep* OR "lane") title:deposit ^fee', top_k=50)
def test_search_syntax_sql_and_odd_text_in_the_query_never_widen_the_search(
    tools, corpus, unchanged, query, top_k
):
    result = call(
        tools["chunk_retriever"], {"query": query, "top_k": top_k, "query_type": "exact", "hyde": "off"}
    )
    event(result.status)
    if result.status == "error":  # blank, too long, NUL or a lone surrogate: each said plainly
        assert re.match(r"Invalid arguments: query(: must| must not be empty)", result.content), (
            result.content
        )
        return
    # Found by keywords means it holds one of the query's words: syntax never matched anything by itself.
    words = stems(keyword_words(query))
    for hit in result.artifact["hits"]:
        if "keyword" in hit["found_by"]:
            assert corpus["words"]["chunks"].get(hit["id"], set()) & words, (query, hit["id"])


def test_a_thousand_levels_of_nesting_is_a_tool_error_not_a_recursion_error(tools):
    for tool in tools.values():
        for kind in ("dict", "list"):
            for argument in ("filters", "query", "input_schema", "top_k"):
                args = {"query": "deposit", argument: nest(1000, kind)}
                result = call(tool, args)
                assert result.status == "error", result.content
                assert result.content.startswith(f"Invalid arguments: {argument}: nested more than 32 levels")
                assert tool.invoke(args).startswith("Invalid arguments:")  # a plain call gets the same text


async def test_the_async_tools_refuse_the_same_input(tools):
    tool = tools["chunk_retriever"]
    cases = [
        ({"filters": nest(1000, "dict")}, "filters: nested more than 32 levels"),
        ({"query": "dep\ud800osit"}, "query: must be valid Unicode text"),
        ({"top_k": True}, "top_k: must be a whole number between 1 and 50"),
        ({"filters": {"year": 10**30}}, "filters: 'year': numbers must be finite"),
        ({"document_ids": ["\udfff"]}, "document_ids[0]: must be valid Unicode text"),
        (
            {"query_type": "summarize", "document_ids": ["fee-schedule"], "filters": {"category": "policy"}},
            "filters: query_type 'summarize' returns every chunk of document_ids and applies no filters",
        ),
    ]
    for args, message in cases:
        result = await tool.ainvoke(
            {"type": "tool_call", "id": "c", "name": tool.name, "args": {"query": "deposit", **args}}
        )
        assert result.status == "error" and result.content.startswith(f"Invalid arguments: {message}"), (
            result.content
        )


# --- the store's read methods, called directly ---------------------------------------------------------

vector_256 = st.lists(st.floats(-1, 1, width=32), min_size=256, max_size=256)
hostile_vectors = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=256, max_size=256),
    st.lists(st.floats(-1, 1, width=32), max_size=3),  # another dimension
    st.just([[0.0] * 256]),
    st.just("0.1, 0.2"),
    anything,
    # accepted, but once answered NaN similarities on pgvector: no direction, or sums that overflow
    st.sampled_from([[0.0] * 256, [1e-40] * 256, [1e308] * 256, [3e38, -3e38] * 128]),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=256, max_size=256),
)


def search_strategies(documents: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Valid and hostile values of the arguments every store search takes."""
    scope = st.one_of(
        st.none(), st.lists(st.one_of(st.sampled_from(documents), unknown_ids()), min_size=0, max_size=5)
    )
    valid = {
        "level": st.sampled_from(["documents", "chunks"]),
        "k": st.integers(1, 1000),
        "filters": valid_filters,
        "document_ids": scope,
    }
    hostile = {"level": levels, "k": counts, "filters": hostile_filters, "document_ids": hostile_ids}
    return valid, hostile


def store_call(bad: str | None, method, *args: Any, **kwargs: Any) -> list[Any] | None:
    """The result, or None when the store refused with an InvalidRequest naming the hostile argument;
    any other exception fails the test."""
    try:
        result = method(*args, **kwargs)
    except InvalidRequest as error:
        # PT017: the call may also succeed (hypothesis input); pytest.raises would demand an error
        assert bad is not None, f"valid arguments refused: {error}"  # noqa: PT017
        assert_readable(str(error), bad)
        event(f"refused ({bad})")
        return None
    event(f"answered ({bad or 'all valid'})")
    return result


@SETTINGS
@given(data=st.data())
def test_keyword_search_answers_any_arguments_or_names_the_bad_one(retrieval, corpus, unchanged, data):
    valid, hostile = search_strategies(sorted(corpus["documents"]))
    # A store's query is held to the text rule too (no NUL, no lone surrogate, at most 4000 characters);
    # blank asks for nothing.
    blank = st.sampled_from(["", " ", "\t\n", "\u3000"])
    bad, args = one_bad(
        data,
        {**valid, "query": st.one_of(clean_query, blank)},
        {**hostile, "query": st.one_of(hostile_text, anything)},
    )
    result = store_call(
        bad,
        retrieval.store.keyword_search,
        args["level"],
        args["query"],
        args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    if result is None:
        return
    assert accepted_scope(args["level"], args["k"], args["document_ids"])
    assert isinstance(args["query"], str) and valid_text(args["query"]) and len(args["query"]) <= 4000
    hits = [h.to_dict() for h in result]
    check_hits(
        hits,
        corpus,
        args["level"],
        top_k=args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    words = stems(keyword_words(args["query"]))
    assert all(corpus["words"][args["level"]].get(h["id"], set()) & words for h in hits), args["query"]
    assert all(np.isfinite(h["keyword_score"]) for h in hits)


@SETTINGS
@given(data=st.data())
def test_vector_search_answers_any_arguments_or_names_the_bad_one(retrieval, corpus, unchanged, data):
    valid, hostile = search_strategies(sorted(corpus["documents"]))
    bad, args = one_bad(
        data,
        {**valid, "vector": vector_256, "min_similarity": st.floats(-1, 1)},
        {
            **hostile,
            "vector": hostile_vectors,
            "min_similarity": st.one_of(st.just(float("nan")), st.booleans(), hostile_text, anything),
        },
    )
    try:
        result = store_call(
            bad,
            retrieval.store.vector_search,
            args["level"],
            args["vector"],
            args["k"],
            filters=args["filters"],
            document_ids=args["document_ids"],
            min_similarity=args["min_similarity"],
        )
    except AgentRetrievalError as error:  # a vector of another dimension: the error says which
        # PT017: the call may also succeed (hypothesis input); pytest.raises would demand an error
        assert bad in ("vector", "all") and "dimension" in str(error), str(error)  # noqa: PT017
        return
    if result is None:
        return
    assert accepted_scope(args["level"], args["k"], args["document_ids"])
    hits = [h.to_dict() for h in result]
    check_hits(
        hits,
        corpus,
        args["level"],
        top_k=args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    assert all(h["vector_similarity"] >= args["min_similarity"] for h in hits)


def chunk_strategies(documents: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    valid = {
        "document_ids": st.lists(st.one_of(st.sampled_from(documents), unknown_ids()), max_size=5),
        "limit": st.one_of(st.integers(1, 100), st.integers(1, 100_000)),
    }
    return valid, {"document_ids": hostile_ids, "limit": counts}


def expected_chunks(corpus: dict, ids: list[str], limit: int) -> list[str]:
    """Chunks of these documents, documents in the order first given, each in reading order."""
    order = list(dict.fromkeys(ids))
    chunks = [c for c, (d, _) in corpus["chunks"].items() if d in order]
    return sorted(chunks, key=lambda c: (order.index(corpus["chunks"][c][0]), corpus["chunks"][c][1]))[:limit]


@SETTINGS
@given(data=st.data())
def test_document_chunks_answers_any_arguments_or_names_the_bad_one(retrieval, corpus, unchanged, data):
    bad, args = one_bad(data, *chunk_strategies(sorted(corpus["documents"])))
    result = store_call(bad, retrieval.store.document_chunks, args["document_ids"], args["limit"])
    if result is None:
        return
    assert accepted_scope("chunks", args["limit"], args["document_ids"], maximum=100_000)
    assert [h.id for h in result] == expected_chunks(corpus, args["document_ids"], args["limit"])


@SETTINGS
@given(data=st.data())
def test_unknown_documents_answers_any_ids_or_names_the_bad_one(retrieval, corpus, unchanged, data):
    valid, hostile = chunk_strategies(sorted(corpus["documents"]))
    bad, args = one_bad(data, {"ids": valid["document_ids"]}, {"ids": hostile["document_ids"]})
    result = store_call(bad, retrieval.store.unknown_documents, args["ids"])
    if result is None:
        return
    assert accepted_scope("chunks", 1, args["ids"])
    assert result == list(dict.fromkeys(i for i in args["ids"] if i not in corpus["documents"]))


# --- the inputs that found bugs, kept as plain examples ------------------------------------------------

FOUND = [  # (method, arguments, what the error must say): each once crashed, misled or searched too widely
    (
        "keyword_search",
        ("chunks", "deposit tenancy lane", 0),
        "k: must be a whole number between 1 and 1,000",
    ),
    ("keyword_search", ("chunks", "deposit", -1), "k: must be a whole number"),  # was: every matching row
    ("vector_search", ("chunks", np.ones(256) / 16, -1), "k: must be a whole number"),  # was: every row
    ("keyword_search", ("chunks", "deposit", 10**20), "k: must be"),  # was: OverflowError
    ("keyword_search", ("documents_fts", "deposit", 3), "level: must be 'documents' or 'chunks'"),
    ("keyword_search", ("chunks", None, 3), "query: must be text"),
    ("unknown_documents", ("abc",), "ids: must be a list"),  # was: ['a', 'b', 'c']
    ("unknown_documents", (["\ud800"],), "ids[0]: must be valid Unicode text"),  # was: UnicodeEncodeError
    ("document_chunks", (["banda-lane-property-file"], -1), "limit: must be"),
]


@pytest.mark.parametrize(("method", "args", "message"), FOUND, ids=[f"{m}-{msg[:24]}" for m, _, msg in FOUND])
def test_inputs_that_once_crashed_are_clear_errors(retrieval, method, args, message):
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        getattr(retrieval.store, method)(*args)


@pytest.mark.parametrize(
    "filters",
    [
        {"year": 10**30},
        {"year": float("inf")},
        {"entity": "\ud800"},
        {"year": {"$gt": 1}},
        {"": 1},
        {"a\x00": 1},
        {1: "x"},
        "category=policy",
    ],
)
def test_store_filters_are_checked_like_the_tools(retrieval, filters):
    with pytest.raises(InvalidRequest, match=r"^filters: "):
        retrieval.store.keyword_search("chunks", "deposit", 3, filters=filters)


def test_the_every_row_marker_is_not_a_word_anyone_can_search_for(retrieval):
    # Every row's FTS entry holds this marker; as a query word it used to match all of them.
    for query in ("zzagentretrievaleveryrow", "ZZAGENTRETRIEVALEVERYROWS"):
        for level in ("documents", "chunks"):
            assert retrieval.store.keyword_search(level, query, 50) == []
        assert retrieval.store.keyword_search("documents", f"{query} banda lane deposit", 50)
