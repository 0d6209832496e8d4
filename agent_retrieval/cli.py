"""The `agent-retrieval` command: ingest, query, stats, reembed, config, eval, db init and an offline demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from agent_retrieval import __version__
from agent_retrieval.context import Context, EmbeddingSettings
from agent_retrieval.core.text import counted, printable
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.models import MAX_LISTED, ChunkSearchRequest, HydeMode, SearchRequest, parse_request

if TYPE_CHECKING:
    from agent_retrieval.ingest import IngestReport
    from agent_retrieval.search.retrieval import Retrieval

log = logging.getLogger("agent_retrieval")

DEMO_DB = "agent_retrieval_demo.db"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 bad input)."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_Printable("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    from agent_retrieval.core.progress import show_notices

    # "loading the embedding model ..." and the like, on stderr; `db init` has no --no-progress
    show_notices(not getattr(args, "no_progress", False))
    try:
        overrides = {"db_path": args.db} if getattr(args, "db", None) else {}
        code: int = args.run(args, Context.from_env(**overrides))
        return code
    except AgentRetrievalError as error:
        print(f"error: {printable(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head -1` stopped reading: the rest goes nowhere, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command ended by SIGPIPE


class _Printable(logging.Formatter):
    """Log lines quote file names and documents' words: their control characters are escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), lines=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-retrieval",
        description="Hybrid (vector + keyword) retrieval with HyDE for LangGraph agents. Settings come from "
        "environment variables (see `agent-retrieval config`).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what happens (never HyDE text or keys)"
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name: str, run: Any, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--db",
            metavar="PATH",
            help="SQLite store file (default: $AGENT_RETRIEVAL_DB or agent_retrieval.db)",
        )
        sub.add_argument("--no-progress", action="store_true", help="no progress bars or notices on stderr")
        sub.set_defaults(run=run)
        return sub

    ingest = command(
        "ingest",
        _ingest,
        "Load files or folders into the store (markdown, text, HTML, rst, AsciiDoc, JSON and JSONL, CSV, "
        "notebooks, source code, PDF and office files), embedding only what changed.",
    )
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to ingest")
    ingest.add_argument(
        "--public",
        action="store_true",
        help="publish these documents to every tenant and to anonymous readers (Postgres "
        "and Supabase only): the operator's explicit act, which no file's metadata can "
        "make. Without it documents are written private, an earlier published version "
        "too",
    )

    for flag, meaning in (("--include", "only files matching"), ("--exclude", "no files matching")):
        ingest.add_argument(
            flag,
            action="append",
            default=[],
            metavar="GLOB",
            help=f"in folders, {meaning} this pattern, matched against the path relative to the folder "
            "given (e.g. 'guides/*.md'; * crosses folders too); repeatable",
        )
    ingest.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="also read a folder's files that are symlinks to files outside it (by default they are "
        "skipped by name: a link to ~/.ssh/id_rsa must not become a searchable document)",
    )
    ingest.add_argument(
        "--no-gitignore",
        action="store_true",
        help="also read what a folder's .gitignore files name (by default left out, as git leaves it)",
    )
    ingest.add_argument(
        "--prune",
        action="store_true",
        help="also delete the documents stored from files under these paths whose files are gone (a file "
        "that exists but cannot be read is kept); renamed files are reported as such",
    )

    ingest.add_argument(
        "--strict",
        action="store_true",
        help="count a folder's files of types agent-retrieval does not read, and those with no words of "
        "their own (templates, redirect stubs), as failures (exit 1), as a CI check would",
    )
    ingest.add_argument(
        "--dry-run",
        action="store_true",
        help="write, embed and delete nothing: say what would be written, renamed and (with --prune) removed",
    )

    delete = command(
        "delete", _delete, "Delete documents (and their chunks) by id, or all under an id prefix."
    )
    delete.add_argument("ids", nargs="*", metavar="ID", help="document ids, as `list` and `query` show them")
    delete.add_argument("--prefix", metavar="PREFIX", help="also every document whose id starts with PREFIX")

    listing = command("list", _list, "List the stored documents: id, chunks, last written, title and file.")
    listing.add_argument("--prefix", default="", metavar="PREFIX", help="only ids starting with PREFIX")
    listing.add_argument(
        "--limit",
        type=int,
        default=1000,
        metavar="N",
        help=f"at most N documents (default 1000, up to {MAX_LISTED - 1:,})",
    )
    listing.add_argument("--json", action="store_true", help="print as JSON")

    query = command("query", _query, "Search the store the way the tools do and print the hits.")
    query.add_argument("query", help="what to look for")
    query.add_argument(
        "--level",
        choices=["documents", "chunks"],
        default="chunks",
        help="documents (document_retriever) or chunks (chunk_retriever); default chunks",
    )
    query.add_argument("-k", "--top-k", type=int, default=5, help="how many hits, 1 to 50 (default 5)")
    query.add_argument(
        "-t",
        "--query-type",
        default="general",
        help="general, exact, conceptual, or summarize (chunks with --document-id)",
    )
    query.add_argument(
        "-f",
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata filter; repeat a key for one-of (e.g. -f year=2023 -f year=2024)",
    )
    query.add_argument(
        "-d",
        "--document-id",
        action="append",
        default=None,
        metavar="ID",
        help="search only inside this document (repeatable; chunks only)",
    )
    query.add_argument(
        "--hyde",
        choices=get_args(HydeMode),
        default="auto",
        help="how the query vector is made (default: as configured)",
    )
    query.add_argument("--json", action="store_true", help="print the full result as JSON")

    ask = command(
        "ask",
        _ask,
        "Answer a question with the rag graph (plan, searches, an answer citing its passages) and print "
        "the answer with its sources. Offline: a heuristic plan and an extractive answer.",
    )
    ask.add_argument("question", help="the question, in your own words")
    ask.add_argument("--json", action="store_true", help="print the whole run: plan, searches, hits, notes")

    stats = command(
        "stats", _stats, "Show counts, the embedding model and dimension, and missing embeddings."
    )
    stats.add_argument("--json", action="store_true", help="print as JSON")

    command(
        "reembed",
        _reembed,
        "Embed rows that lack a vector of the configured model (after a failed ingest or a model change).",
    )

    config = command("config", _config, "Show every setting, its environment variable and current value.")
    config.add_argument(
        "--markdown", action="store_true", help="print the settings reference (docs/configuration.md) instead"
    )

    evaluate = command(
        "eval",
        _eval,
        "Evaluate retrieval on a BEIR folder (corpus.jsonl, queries.jsonl, "
        "qrels/SPLIT.tsv): ingest it (cached: a rerun embeds nothing), run every "
        "judged query under each mode through the tools' search, and report "
        "nDCG@10, Recall@10, Recall@100 and MRR@10, and all-gold@5/10 (every relevant document in the top k) "
        "over the queries with two or more.",
    )
    evaluate.add_argument("folder", help="the BEIR dataset folder")
    evaluate.add_argument("--split", default="test", help="qrels/SPLIT.tsv to judge by (default test)")
    evaluate.add_argument(
        "--level",
        choices=["documents", "chunks"],
        default="chunks",
        help="rank documents directly, or by their best chunk (default chunks)",
    )
    evaluate.add_argument(
        "--modes",
        metavar="M1,M2",
        help="comma-separated modes (default: every mode this "
        "configuration can run): keyword, vector, hybrid-rrf, hybrid-convex, hyde+hybrid, plan (the rag "
        "graph's retrieval: planned searches, fused)",
    )
    evaluate.add_argument(
        "--out",
        metavar="DIR",
        default="eval-results",
        help="where the store (unless --db or a DSN is set), run files and report go (default eval-results/)",
    )
    evaluate.add_argument(
        "--limit", type=int, metavar="N", help="only the first N judged queries (a smoke run)"
    )
    evaluate.add_argument(
        "--max-documents",
        type=int,
        metavar="N",
        help="a smaller corpus: the kept queries' judged documents, then others up to N",
    )
    evaluate.add_argument("--json", action="store_true", help="print the report as JSON")

    db = commands.add_parser(
        "db",
        help="Set up the Postgres or Supabase store.",
        description="Set up the Postgres or Supabase store.",
    )
    db_commands = db.add_subparsers(title="commands", required=True, metavar="COMMAND")
    init = db_commands.add_parser(
        "init",
        help="Create the schema, tables, indexes and SQL functions (safe to run again).",
        description="Create the schema, tables, indexes and SQL functions in the database of "
        "$AGENT_RETRIEVAL_DSN (safe to run again), or print them for the Supabase SQL editor.",
    )
    init.add_argument(
        "--dimension", type=int, metavar="N", help="embedding dimension (default: the configured embedder's)"
    )
    init.add_argument(
        "--schema",
        metavar="NAME",
        help="Postgres schema (default: $AGENT_RETRIEVAL_SCHEMA or agent_retrieval)",
    )
    init.add_argument(
        "--print",
        action="store_true",
        dest="print_sql",
        help="print the SQL instead of running it (paste it into the Supabase SQL editor)",
    )
    init.set_defaults(run=_db_init)

    mcp = command(
        "mcp",
        _mcp,
        "Serve document_retriever, chunk_retriever and similarity_search to MCP clients (Claude Desktop, "
        "IDEs, langchain-mcp-adapters): over stdio for the person who starts it, or over streamable HTTP "
        "for signed-in users (Supabase access tokens).",
    )
    mcp.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP"
    )
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP: the port (default 8765)")
    mcp.add_argument(
        "--index-tool",
        action="store_true",
        help="also offer index_document, so callers can store documents (over HTTP, each in their own "
        "tenant)",
    )

    command(
        "demo",
        _demo,
        f"Ingest the bundled demo corpus (into {DEMO_DB} unless --db is given) and answer "
        "its questions offline with document_retriever and chunk_retriever.",
    )
    return parser


def _retrieval(context: Context, *, store_must_exist: bool = False) -> Any:
    """The search machinery for a command. Reading a store that does not exist is an error (a misspelt --db
    would otherwise create an empty store and answer "No matches"); a write creates the store file, never
    its missing folders."""
    _check_store_path(context, must_exist=store_must_exist)
    from agent_retrieval.search.retrieval import (
        Retrieval,  # the heavy imports wait until a command needs them
    )

    return Retrieval(context)


def _check_store_path(context: Context, *, must_exist: bool) -> None:
    settings = context.store
    if settings.backend != "sqlite":
        return
    from agent_retrieval.stores import missing_store, sqlite_path

    path = sqlite_path(settings)
    if must_exist and (problem := missing_store(settings)):
        raise _bad(problem)
    if not settings.tenant_id and not path.parent.is_dir():  # a tenant's folder is the store's to make
        raise _bad(f"{path}: the folder {path.parent} does not exist; create it, or choose another --db")


def _ingest(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.ingest.loaders import SUPPORTED_SUFFIXES, describe_unsupported
    from agent_retrieval.search.retrieval import Retrieval

    _check_store_path(context, must_exist=args.dry_run)  # a dry run compares with a store, never makes one
    with Retrieval(context) as retrieval:
        report = retrieval.ingest(
            args.paths,
            progress=not args.no_progress,
            public=args.public,
            prune=args.prune,
            include=args.include,
            exclude=args.exclude,
            follow_symlinks=args.follow_symlinks,
            gitignore=not args.no_gitignore,
            dry_run=args.dry_run,
        )
    would = "would be " if args.dry_run else ""
    # File names and ids are the files' authors': printed with their control characters escaped.
    for old, new in report.renamed:
        print(f"{would}renamed: {printable(old)} -> {printable(new)}", file=sys.stderr)
    for doc_id in report.removed:
        print(f"{would}removed: {printable(doc_id)} (its file is gone)", file=sys.stderr)
    for problem in report.skipped_files:
        print(f"skipped: {printable(problem)}", file=sys.stderr)
    if any(": leads outside " in problem for problem in report.skipped_files) and not args.follow_symlinks:
        print("note: --follow-symlinks reads a folder's symlinks to files outside it", file=sys.stderr)
    for problem in report.wordless_files:
        print(f"no words, passed over: {printable(problem)}", file=sys.stderr)
    for line in describe_unsupported(report.unsupported_files):
        print(f"not a supported type, passed over: {printable(line)}", file=sys.stderr)
    if args.dry_run:
        for path in report.left_out:
            print(
                f"left out: {printable(path)} (a build folder, tool file or .gitignore entry; name it to "
                "read it)",
                file=sys.stderr,
            )
    if not report.documents and not report.skipped_files and not report.wordless_files:
        raise _bad(
            f"nothing to ingest in {', '.join(args.paths)}: no files of a supported type "
            f"({', '.join(SUPPORTED_SUFFIXES)})"
        )
    summary = _dry_run_summary(report) if args.dry_run else report.summary()
    if report.skipped_files:
        summary += f"; {len(report.skipped_files)} files not ingested (listed above)"
    if report.wordless_files:
        summary += f"; {len(report.wordless_files)} files with no words of their own passed over"
    if report.unsupported_files:
        summary += f"; {len(report.unsupported_files)} files of other types passed over"
    if report.left_out:
        summary += f"; {len(report.left_out)} build folders, tool files or .gitignore entries left out"
    print(summary)
    # Files of other types (a docs folder's images) and with no words (its templates) are a folder's
    # ordinary contents: a failure only when asked (--strict). report.errors (a document the store could
    # not take, an embedding failure) are logged as they happen.
    passed_over = report.unsupported_files + report.wordless_files
    failed = report.skipped_files + (passed_over if args.strict else [])
    return 1 if report.unembedded or failed or report.errors else 0


def _dry_run_summary(report: IngestReport) -> str:
    """What an ingest would have done: its report's counts as intentions."""
    text = f"dry run, nothing changed: {counted(report.documents, 'document')}: {report.written:,} to write"
    text += f", {report.unchanged:,} unchanged"
    changes = (("rename", report.renamed), ("remove", report.removed))
    return text + "".join(f"; {len(ids):,} to {verb}" for verb, ids in changes if ids)


def _delete(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.stores import open_store

    if not args.ids and args.prefix is None:
        raise _bad("name the documents to delete: their ids, or --prefix PREFIX")
    if args.prefix == "":
        raise _bad("--prefix '' would delete every document; give the start of their ids")
    _check_store_path(context, must_exist=True)
    with open_store(context.store) as store:
        deleted = set(store.document_states(args.ids))
        store.delete_documents(sorted(deleted))
        while args.prefix and (under := [doc.id for doc in store.list_documents(args.prefix, MAX_LISTED)]):
            if not store.delete_documents(under):
                break
            deleted.update(under)
    unknown = [doc_id for doc_id in dict.fromkeys(args.ids) if doc_id not in deleted]
    if unknown:
        print(
            f"not in the store (nothing deleted for them): {', '.join(map(repr, unknown))}", file=sys.stderr
        )
    if args.prefix and not any(doc_id.startswith(args.prefix) for doc_id in deleted):
        print(f"no document id starts with {args.prefix!r}", file=sys.stderr)
        unknown.append(args.prefix)
    print(f"{counted(len(deleted), 'document')} deleted")
    return 1 if unknown else 0


def _list(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.stores import open_store

    if not 1 <= args.limit < MAX_LISTED:  # one more is asked for, to tell whether there are more
        raise _bad(f"--limit must be 1 to {MAX_LISTED - 1:,} (got {args.limit})")
    _check_store_path(context, must_exist=True)
    with open_store(context.store) as store:
        listed = store.list_documents(args.prefix, args.limit + 1)
    shown = listed[: args.limit]
    if args.json:
        print(json.dumps([listing._asdict() for listing in shown], indent=2, ensure_ascii=False))
    else:
        for doc in shown:  # ids, titles and paths are the files' authors': escaped for the terminal
            fields = (doc.id, str(doc.chunks), doc.updated, doc.title, doc.source or "")
            print("\t".join(map(printable, fields)))
    more = " or more; --limit shows others" if len(listed) > args.limit else ""
    print(f"{counted(len(shown), 'document')}{more}", file=sys.stderr)
    return 0


def _query(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.tools import format_result

    data: dict[str, Any] = {
        "query": args.query,
        "top_k": args.top_k,
        "query_type": args.query_type,
        "filters": _filters(args.filter),
        "hyde": args.hyde,
    }
    request: SearchRequest
    if args.level == "chunks":
        request = parse_request(ChunkSearchRequest, {**data, "document_ids": args.document_id})
    elif args.document_id:
        raise _bad("--document-id works with --level chunks only")
    else:
        request = parse_request(SearchRequest, data)
    with _retrieval(context, store_must_exist=True) as retrieval:
        result = retrieval.search(request, args.level)
        files = _files(retrieval, [hit.document_id for hit in result.hits])
    if args.json:
        print(json.dumps({**result.to_dict(), "files": files}, indent=2, ensure_ascii=False))
        return 0
    print(format_result(result))
    if files:
        print("\nfiles:")
        for doc_id, source in files.items():  # the files' authors' names: escaped for the terminal
            print(printable(f"  {doc_id}: {source}"))
    return 0


def _files(retrieval: Retrieval, ids: list[str]) -> dict[str, str]:
    """The file each of these documents was loaded from, where the store tells this writer (a reader's key
    on Supabase may not ask)."""
    try:
        states = retrieval.store.document_states(list(dict.fromkeys(ids)))
    except AgentRetrievalError:
        return {}
    return {doc_id: state.source for doc_id in ids if (state := states.get(doc_id)) and state.source}


def _ask(args: argparse.Namespace, context: Context) -> int:
    import asyncio

    from agent_retrieval.graphs import rag
    from agent_retrieval.server.graph_parts import GraphParts

    with _retrieval(context, store_must_exist=True) as retrieval:
        graph = rag.build(GraphParts(retrieval=retrieval))
        question = {"messages": [("user", args.question)]}
        # A Context built by the operator's code is used as-is (graph_parts.run_context); a server run's
        # context would be RunSettings.
        state = asyncio.run(graph.ainvoke(question, context=context))  # type: ignore[call-overload]
    state.pop("messages", None)
    if args.json:
        print(json.dumps(state, indent=2, ensure_ascii=False))
        return 0
    if not state.get("plan"):  # the question itself was refused (empty, too long)
        raise _bad(state["answer"])
    hits = {hit["id"]: hit for hit in state["hits"]}
    print(printable(state["answer"], lines=True))  # quotes the documents' words: escaped as file names are
    if state["citations"]:
        print("\nSources:")
        for cited in state["citations"]:
            print(printable(f"  [{cited}] {hits[cited]['heading_path'] or hits[cited]['document_id']}"))
    for note in state["notes"]:
        print(f"note: {printable(note)}", file=sys.stderr)
    return 0


def _filters(pairs: list[str]) -> dict[str, Any] | None:
    """-f key=value pairs as a filter; a repeated key becomes a one-of list."""
    values: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _bad(f"--filter {pair!r}: expected KEY=VALUE, e.g. category=policy")
        values.setdefault(key, []).append(value)
    return {key: found[0] if len(found) == 1 else found for key, found in values.items()} or None


def _stats(args: argparse.Namespace, context: Context) -> int:
    from dataclasses import asdict

    from agent_retrieval.stores import open_store

    _check_store_path(context, must_exist=True)
    with open_store(context.store) as store:
        stats = asdict(store.stats())
    stats["embedder"] = _embedder_status(context.embeddings)
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        width = max(len(k) for k in stats)
        print(
            "\n".join(
                f"{k.replace('_', ' '):<{width}}  {v if v is not None else '-'}" for k, v in stats.items()
            )
        )
    return 0


def _embedder_status(settings: EmbeddingSettings) -> str:
    """Which embedder this configuration uses and how it runs (nothing is loaded to say so)."""
    if settings.embedding_provider != "local":
        return settings.embedding_provider
    from agent_retrieval.providers import onnx_model
    from agent_retrieval.providers.embeddings import BUNDLED_LOCAL_MODEL, bundled_model_path

    name = f"local {settings.local_embedding_model}"
    if settings.local_runtime == "torch" or settings.local_embedding_model != BUNDLED_LOCAL_MODEL:
        return f"{name} on sentence-transformers (torch)"
    cache = onnx_model.cache_folder(settings.local_model_cache)
    return f"{name} on {onnx_model.status(bundled_model_path(), cache)}"


def _reembed(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.ingest import reembed

    with _retrieval(context, store_must_exist=True) as retrieval:
        report = reembed(retrieval.store, retrieval.embedder, progress=not args.no_progress)
        model = retrieval.embedder.model_id
    print(f"{report.embedded} texts embedded, {report.reused} vectors reused; the store now uses {model}")
    return 0


def _eval(args: argparse.Namespace, context: Context) -> int:
    from pathlib import Path

    from agent_retrieval.evaluation import evaluate, load_beir
    from agent_retrieval.ingest import ingest

    for flag, value in (("--limit", args.limit), ("--max-documents", args.max_documents)):
        if value is not None and value < 1:
            raise _bad(f"{flag} must be at least 1 (got {value})")
    dataset = load_beir(args.folder, args.split, limit=args.limit, max_documents=args.max_documents)
    root = Path(args.out)
    name = dataset.folder.name + (f"-{dataset.corpus_size}" if dataset.subset is not None else "")
    if context.store.backend == "sqlite" and not args.db:
        root.mkdir(parents=True, exist_ok=True)
        context = context.replace(db_path=str(root / f"{name}.db"))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()] if args.modes else None
    with _retrieval(context) as retrieval:
        report = ingest(
            dataset.documents(), retrieval.store, retrieval.embedder, context, progress=not args.no_progress
        )
        print(report.summary(), file=sys.stderr)
        out = root / f"{name}-{args.split}-{args.level}"
        result = evaluate(
            dataset, retrieval, out, level=args.level, modes=modes, progress=not args.no_progress
        )
    (out / "report.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.table())
    return 0


def _config(args: argparse.Namespace, context: Context) -> int:
    if args.markdown:
        from agent_retrieval.context import settings_markdown

        print(settings_markdown(), end="")
        return 0
    for name, env, value, description in context.describe():
        print(f"{name} = {value!r}\n    ${env}: {description}")
    return 0


def _db_init(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval.stores.rpc import render_sql

    store, dimension = context.store, args.dimension
    schema = args.schema or store.db_schema
    if dimension is None:
        from agent_retrieval.providers.embeddings import make_embedder

        embedder = make_embedder(context.embeddings)
        dimension = len(embedder.embed_query("dimension probe"))
        print(f"embedding dimension {dimension} (from {embedder.model_id})", file=sys.stderr)
    if args.print_sql:
        print(render_sql(schema, dimension, store.vector_index_build_depth))
        return 0
    if not store.backend_dsn:
        where = (
            "Supabase's API cannot create tables: "
            if store.supabase_url
            else "No database is configured (the embedded SQLite store needs no setup): "
        )
        raise _bad(
            where + "set AGENT_RETRIEVAL_DSN to the database's connection string, or run "
            "`agent-retrieval db init --print` and paste the SQL into the Supabase SQL editor"
        )
    from agent_retrieval.stores.postgres import PostgresStore

    with PostgresStore(store.backend_dsn, schema=schema) as postgres:
        for change in postgres.init(dimension, build_depth=store.vector_index_build_depth):
            print(change)
        print(f"schema {schema} is ready for {dimension}-dimensional vectors at {postgres.location}")
    return 0


def _mcp(args: argparse.Namespace, context: Context) -> int:
    if not 0 < args.port < 65536:
        raise _bad(f"--port must be 1 to 65535 (got {args.port})")
    _check_store_path(context, must_exist=not args.index_tool)
    import asyncio

    try:
        from agent_retrieval.server import mcp_server
    except ModuleNotFoundError as missing:
        raise _bad(f"the MCP server needs {missing.name}: pip install 'agent-retrieval[mcp]'") from None

    if args.transport == "stdio":
        asyncio.run(mcp_server.serve_stdio(context, writes=args.index_tool))
    else:
        mcp_server.serve_http(context, host=args.host, port=args.port, writes=args.index_tool)
    return 0


def _demo(args: argparse.Namespace, context: Context) -> int:
    from agent_retrieval import demo
    from agent_retrieval.ingest import ingest
    from agent_retrieval.ingest.loaders import load_documents
    from agent_retrieval.tools import make_retrieval_tools

    if not args.db:
        context = context.replace(db_path=DEMO_DB)
    print(f"Ingesting the demo corpus into {context.store.db_path} ...")
    if not context.use_hyde:
        print(
            "HyDE is off: set AGENT_RETRIEVAL_USE_HYDE=true with OPENAI_API_KEY or OPENAI_BASE_URL "
            "to turn it on."
        )
    with _retrieval(context) as retrieval:
        print(
            ingest(
                load_documents([demo.corpus_dir()]), retrieval.store, retrieval.embedder, context
            ).summary()
        )
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
        questions, documents_found, passages_found = demo.questions(), 0, 0
        for item in questions:
            question = item["question"]
            print("\n" + "=" * 100 + f"\nQ: {question}\n")
            documents = _call(document_retriever, {"query": question, "top_k": 3})
            print(documents.content)
            ids = [hit["id"] for hit in documents.artifact["hits"]]
            passages = _call(chunk_retriever, {"query": question, "document_ids": ids, "top_k": 2})
            print("\n" + passages.content)
            documents_found += item["expected_document"] in ids
            answering = [n for n, hit in enumerate(passages.artifact["hits"], 1) if demo.answers(item, hit)]
            passages_found += bool(answering)
            sections = " or ".join(repr(s) for s in item["answering_sections"])
            if answering:
                print(f"\nFOUND: passage {answering[0]} answers it (the answer is in {sections})")
            else:
                print(f"\nMISSED: the answer is in {item['expected_document']!r}, under {sections}")
    print(
        f"\nThe answering document was among the top 3 for {documents_found} of {len(questions)} questions, "
        f"and the answering passage among the 2 shown for {passages_found}.\n"
        f"{_studio_hint(context.store.db_path)}"
    )
    return 0


def _studio_hint(db_path: str) -> str:
    """How to open this store in LangGraph Studio, from here: the server needs the studio extra, and it
    serves the graphs langgraph.json names (this repository's), signed in as the operator on this machine."""
    import importlib.util

    command = f"AGENT_RETRIEVAL_DB={db_path} langgraph dev"
    if importlib.util.find_spec("langgraph_cli") is None:
        command = f"pip install 'agent-retrieval[studio]', then {command}"
    return f"To ask the graphs in LangGraph Studio over this store (from langgraph.json's folder): {command}"


def _call(tool: Any, args: dict[str, Any]) -> Any:
    """Invoke a tool as an agent does (a tool call), getting a ToolMessage with content and artifact."""
    return tool.invoke({"type": "tool_call", "id": "demo", "name": tool.name, "args": args})


def _bad(message: str) -> AgentRetrievalError:
    from agent_retrieval.errors import InvalidRequest

    return InvalidRequest(message)


if __name__ == "__main__":
    sys.exit(main())
