"""Code generation from retrieved schemas: check the request -> retrieve context -> generate -> validate.

A failed validation goes back to the model once, with the errors; the graph then ends either way. SQL is
checked by compiling it (never running it) in an in-memory SQLite database built from the CREATE
statements of the retrieved context; Python is compiled, never executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic validates typing's TypedDict from Python 3.12 on

from agent_retrieval.context import RunSettings
from agent_retrieval.core.prompts import load_prompt
from agent_retrieval.core.quoting import element, passage, quote
from agent_retrieval.core.text import shorten
from agent_retrieval.core.validation import Question, Text, check_question
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.models import MAX_TOP_K, ChunkSearchRequest, parse_request
from agent_retrieval.server.graph_parts import GraphParts, add_nodes, read_state, run_context

MAX_ATTEMPTS = 2  # the first answer and one fix
MAX_PASSAGE_CHARS = 20_000  # a chunk at the largest chunk_size
MAX_CODE_CHARS = 100_000
MAX_ERRORS, MAX_ERROR_CHARS = 20, 4_000
OFFLINE_NOTE = "no chat model configured: set OPENAI_API_KEY or OPENAI_BASE_URL"


class Passage(TypedDict):
    """One retrieved chunk, as the model saw it."""

    id: str
    heading_path: Annotated[str, Text(0, MAX_PASSAGE_CHARS)]
    content: Annotated[str, Text(0, MAX_PASSAGE_CHARS)]


def add_notes(left: list[str], right: list[str]) -> list[str]:
    """Append notes, once each (the validator repeats its notes on the second attempt)."""
    return left + [note for note in dict.fromkeys(right) if note not in left]


@dataclass(kw_only=True)
class InputState:
    """What the user asks for."""

    request: str = ""
    """What the code should do, in the user's own words."""

    language: str = "sql"
    """The language to write: sql (one read-only SQLite query) or python."""


@dataclass(kw_only=True)
class State(InputState):
    """The run so far: the retrieved context, the latest code and what validation said of it."""

    passages: list[Passage] = field(default_factory=list)
    """The retrieved context the code is written from (returned even when no code could be written)."""

    context_ids: list[str] = field(default_factory=list)
    """Chunk ids of `passages`, best first."""

    hyde: str = "off"
    """Whether retrieval used HyDE: off, skipped, used or failed (the HyDE text itself is never kept)."""

    degraded: list[str] = field(default_factory=list)
    """Retrieval paths that did not run as configured, with the reason."""

    code: str = ""
    """The latest generated code, unwrapped from its fence."""

    valid: bool = False
    """Whether `code` passed validation."""

    errors: list[str] = field(default_factory=list)
    """What is wrong: bad input, a failed retrieval or model call, or the latest code's validation errors."""

    attempts: int = 0
    """Chat model calls made to write the code (at most 2)."""

    notes: list[str] = field(default_factory=list)
    """How the result came about: earlier failed attempts, skipped schema statements, offline mode."""


class Readable(BaseModel):
    """What the nodes after check_request read of a thread's state, held to the bounds a run's own writes
    keep: on a server a caller can write any of it before any node."""

    request: Question
    language: Literal["sql", "python"]
    passages: Annotated[list[Passage], Field(max_length=MAX_TOP_K)]
    code: Annotated[str, Text(0, MAX_CODE_CHARS)]
    errors: Annotated[list[Annotated[str, Text(0, MAX_ERROR_CHARS)]], Field(max_length=MAX_ERRORS)]
    attempts: Annotated[int, Field(ge=0, le=MAX_ATTEMPTS)]


def readable(state: State) -> State:
    """`state` with the fields the nodes use checked (InvalidRequest naming the first that is not)."""
    given = {name: getattr(state, name) for name in Readable.model_fields}
    return replace(state, **read_state("state", given, Readable).model_dump())


# --- validation (plain functions, run in a worker thread) ------------------------------------------

_CREATE = re.compile(r"(?im)^[ \t]*CREATE\s+(?:TEMP(?:ORARY)?\s+)?(?:TABLE|VIEW)\b")
_LEADING_COMMENTS = re.compile(r"(?:\s|--[^\n]*|/\*.*?\*/)*", re.DOTALL)
_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_WRITES = {sqlite3.SQLITE_INSERT: "INSERT", sqlite3.SQLITE_UPDATE: "UPDATE", sqlite3.SQLITE_DELETE: "DELETE"}
_SCHEMA_TABLES = {"sqlite_master", "sqlite_temp_master"}  # what CREATE writes: the schema itself
# Retrieved text builds the schema database, so it may only declare: a statement that computes data (CREATE
# TABLE ... AS SELECT) could take gigabytes of memory in one expression, and is skipped. The deadline, the
# size of any one value and the database's size bound what is left.
SCHEMA_SECONDS = 5.0
SCHEMA_MAX_PAGES = 10_000  # about 40 MB
SCHEMA_MAX_VALUE_BYTES = 1_000_000  # SQLite's limit on any one string or blob (and statement)
MAX_SCHEMA_STATEMENTS = 200
COMPUTES_DATA = "it computes data (CREATE TABLE ... AS SELECT): only declared columns are read"


def schema_statements(passages: list[Passage]) -> tuple[list[str], list[str]]:
    """The CREATE TABLE / VIEW statements in the passages, once each, and notes on unfinished ones."""
    statements: list[str] = []
    notes: list[str] = []
    for retrieved in passages:
        text = retrieved["content"]
        for match in _CREATE.finditer(text):
            end = text.find(";", match.start())
            # A ';' inside a string literal does not end the statement; complete_statement knows.
            while end != -1 and not sqlite3.complete_statement(text[match.start() : end + 1]):
                end = text.find(";", end + 1)
            if end == -1:
                notes.append(f"skipped a CREATE statement in {retrieved['id']} that the passage cuts off")
            else:
                statements.append(text[match.start() : end + 1].strip())
    return list(dict.fromkeys(statements)), notes


def schema_database(passages: list[Passage]) -> tuple[sqlite3.Connection, list[str], list[str]]:
    """An in-memory database of the passages' schemas, the names of its tables and views, and notes."""
    statements, notes = schema_statements(passages)
    if len(statements) > MAX_SCHEMA_STATEMENTS:
        notes.append(f"read the first {MAX_SCHEMA_STATEMENTS} of {len(statements)} schema statements")
        statements = statements[:MAX_SCHEMA_STATEMENTS]
    db = sqlite3.connect(":memory:")
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SCHEMA_MAX_VALUE_BYTES)
    db.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, SCHEMA_MAX_VALUE_BYTES)
    db.execute(f"PRAGMA max_page_count = {SCHEMA_MAX_PAGES}")
    computes: list[bool] = []

    def declare_only(action: int, table: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_SELECT or (action in _WRITES and table not in _SCHEMA_TABLES):
            computes.append(True)
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    deadline = time.monotonic() + SCHEMA_SECONDS
    db.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
    db.set_authorizer(declare_only)
    for statement in statements:
        computes.clear()
        try:
            db.execute(statement)
        except sqlite3.Error as error:
            reason = COMPUTES_DATA if computes else str(error)
            notes.append(f"skipped schema statement {statement.splitlines()[0][:80]!r}: {reason}")
    db.set_authorizer(None)
    db.set_progress_handler(None, 0)
    names = [
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name"
        )
    ]
    return db, names, notes


def validate_sql(code: str, passages: list[Passage]) -> tuple[list[str], list[str]]:
    """Errors and notes for one read-only query, compiled (not run) against the retrieved schemas."""
    statement = _LEADING_COMMENTS.sub("", code, count=1)  # the pattern also matches nothing, at the start
    keyword = re.findall(r"^\w*", statement)[0].upper()
    if keyword not in ("SELECT", "WITH"):
        return [
            (
                "only a single read-only query is allowed (SELECT, or WITH ... SELECT); "
                f"got {keyword or 'no statement'}"
            )
        ], []
    db, names, notes = schema_database(passages)
    known = f"tables in the retrieved schemas: {', '.join(names)}" if names else "no tables were retrieved"
    writes: list[str] = []

    def authorize(action: int, table: str | None, *_: object) -> int:
        if action in _READS:
            return sqlite3.SQLITE_OK
        writes.append(f"{_WRITES.get(action, 'change')} {table or ''}".strip())
        return sqlite3.SQLITE_DENY

    db.set_authorizer(authorize)
    with contextlib.closing(db):
        try:
            db.execute("EXPLAIN " + code)  # compiles the statement without reading or writing a row
        except sqlite3.ProgrammingError as error:
            if "one statement" in str(error):
                return ["several statements found: write a single SELECT query"], notes
            # Otherwise its parameters (? or :name) are unbound, which sqlite3 reports after compiling.
        except sqlite3.Error as error:
            if writes:
                return [
                    (
                        f"the query is not read-only (it would {', '.join(writes)}): "
                        "only SELECT queries are allowed"
                    )
                ], notes
            return [f"the SQL does not compile against the retrieved schemas: {error} ({known})"], notes
    return [], [
        *notes,
        (f"the SQL compiled in SQLite against the retrieved schemas ({known}); it was not run on any data"),
    ]


def validate_python(code: str, passages: list[Passage]) -> tuple[list[str], list[str]]:
    """Errors and notes for Python source, compiled and never executed."""
    try:
        compile(code, "<generated>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return [f"the Python does not compile: line {error.lineno}: {error.msg}"], []
    except ValueError as error:  # e.g. NUL bytes in the source
        return [f"the Python does not compile: {error}"], []
    return [], ["the Python was compiled, not run"]


VALIDATORS: dict[str, Callable[[str, list[Passage]], tuple[list[str], list[str]]]] = {
    "sql": validate_sql,
    "python": validate_python,
}


# --- prompt and answer -----------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n(.*?)```", re.DOTALL)  # an info string holds no "`"


def extract_code(text: str, language: str) -> str:
    """The code of an answer: its fenced block in `language` (else its first block), or the whole text."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return text.strip()
    chosen: str = next((body for tag, body in blocks if tag.lower() == language), blocks[0][1])
    return chosen.strip()


def codegen_messages(state: State) -> list[BaseMessage]:
    """The system prompt, then the request, the context and, on a retry, the failed code and its errors;
    all of it quoted, since the model's own code and the validator's errors may repeat retrieved text."""
    passages = "\n".join(passage(p["content"], id=p["id"], source=p["heading_path"]) for p in state.passages)
    parts = [
        element("request", quote(state.request)),
        element("context", passages or "(nothing was retrieved)"),
    ]
    if state.errors and state.code:
        parts.append(element("previous_attempt", quote(f"```{state.language}\n{state.code}\n```")))
        parts.append(element("validation_errors", quote("\n".join(f"- {e}" for e in state.errors))))
    return [
        SystemMessage(load_prompt("codegen").replace("{language}", state.language)),
        HumanMessage("\n\n".join(parts)),
    ]


# --- the graph -------------------------------------------------------------------------------------


def route_on_errors(state: State) -> Literal["continue", "__end__"]:
    """Stop at bad input or a failed retrieval: nothing after it could help."""
    return "__end__" if state.errors else "continue"


def route_generation(state: State) -> Literal["validate_code", "__end__"]:
    """Validate what the model wrote; stop if no model was called (offline) or the call failed."""
    return "validate_code" if state.attempts and not state.errors else "__end__"


def route_validation(state: State) -> Literal["generate_code", "__end__"]:
    """One more attempt after a failed validation, then the result stands either way."""
    return "generate_code" if not state.valid and state.attempts < MAX_ATTEMPTS else "__end__"


async def check_request(state: State) -> dict[str, Any]:
    """Reject what cannot be served, before any retrieval or model call; clear an earlier run's result."""
    errors = []
    request = state.request.strip() if isinstance(state.request, str) else ""
    language = state.language.strip().lower() if isinstance(state.language, str) else ""
    try:
        check_question(state.request, "request")
    except InvalidRequest as error:
        errors.append(str(error))
    if language not in VALIDATORS:
        errors.append(f"language: must be one of {', '.join(VALIDATORS)} (got {state.language!r})")
    fresh = State(request=request, language=language, errors=errors)  # a thread's next run starts clean
    return {f.name: getattr(fresh, f.name) for f in fields(State)}


async def retrieve_context(
    state: State, runtime: Runtime[RunSettings], *, parts: GraphParts
) -> dict[str, Any]:
    """Find the schemas and examples the code should be written from."""
    context = run_context(runtime)
    try:
        request = parse_request(ChunkSearchRequest, {"query": state.request, "top_k": context.answer_chunks})
        async with parts.open_retrieval(context) as retrieval:
            result = await retrieval.asearch(request, "chunks")
    except AgentRetrievalError as error:
        return {"errors": [f"retrieval failed: {error}"]}
    passages = [
        Passage(
            id=h.id,
            heading_path=(h.heading_path or h.title)[:MAX_PASSAGE_CHARS],
            content=h.content[:MAX_PASSAGE_CHARS],
        )
        for h in result.hits
    ]
    empty = "nothing was retrieved: ingest your schemas first (agent-retrieval ingest)"
    return {
        "passages": passages,
        "context_ids": [p["id"] for p in passages],
        "hyde": result.hyde,
        "degraded": result.degraded,
        "notes": add_notes(state.notes, [] if passages else [empty]),
    }


async def generate_code(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Ask the chat model for code, showing it the errors of the previous attempt if there was one."""
    try:
        state = readable(state)
        if state.attempts >= MAX_ATTEMPTS:
            raise InvalidRequest(f"the thread's state holds {state.attempts} attempts, the most there are")
    except InvalidRequest as error:
        return {"valid": False, "errors": [str(error)]}
    context = run_context(runtime)
    model = await parts.chat(context)
    if model is None:
        return {"notes": add_notes(state.notes, [OFFLINE_NOTE])}
    attempt = state.attempts + 1
    timeout = context.chat_timeout_seconds
    retried = (
        [f"attempt {state.attempts} failed validation and went back to the model: " + "; ".join(state.errors)]
        if state.attempts
        else []
    )
    notes = add_notes(state.notes, retried)
    try:
        answer = await asyncio.wait_for(model.ainvoke(codegen_messages(state)), timeout=timeout)
    except TimeoutError:
        return {
            "attempts": attempt,
            "valid": False,
            "notes": notes,
            "errors": [f"the chat model did not answer within {timeout:g} s (chat_timeout_seconds)"],
        }
    except Exception as error:  # any provider failure ends the run with a message, never a traceback
        return {
            "attempts": attempt,
            "valid": False,
            "notes": notes,
            "errors": [f"the chat model failed: {type(error).__name__}: {error}"],
        }
    return {
        "attempts": attempt,
        "code": extract_code(answer.text, state.language)[:MAX_CODE_CHARS],
        "errors": [],
        "notes": notes,
    }


async def validate_code(state: State) -> dict[str, Any]:
    """Check the code without running it; a compiler's thread keeps the event loop free."""
    try:
        state = readable(state)
    except InvalidRequest as error:
        return {"valid": False, "errors": [str(error)]}
    if not state.code:
        return {"valid": False, "errors": ["the model returned no code"]}
    errors, notes = await asyncio.to_thread(VALIDATORS[state.language], state.code, state.passages)
    # within what the next attempt reads back (a schema may name hundreds of tables)
    errors = [shorten(error, MAX_ERROR_CHARS) for error in errors[:MAX_ERRORS]]
    return {"valid": not errors, "errors": errors, "notes": add_notes(state.notes, notes)}


def build(parts: GraphParts = GraphParts()) -> CompiledStateGraph[State, RunSettings, InputState, State]:
    """The code-generation graph, using `parts` for retrieval and the chat model."""

    builder = StateGraph(State, input_schema=InputState, context_schema=RunSettings)
    add_nodes(builder, check_request, retrieve_context, generate_code, validate_code, parts=parts)
    builder.add_edge(START, "check_request")
    builder.add_conditional_edges(
        "check_request", route_on_errors, {"continue": "retrieve_context", END: END}
    )
    builder.add_conditional_edges(
        "retrieve_context", route_on_errors, {"continue": "generate_code", END: END}
    )
    builder.add_conditional_edges("generate_code", route_generation)
    builder.add_conditional_edges("validate_code", route_validation)
    compiled = builder.compile()
    compiled.name = "codegen"
    return compiled


graph = build()
