"""`agent-retrieval mcp --transport http` refuses settings that would trust callers it cannot check."""

from __future__ import annotations

import pytest

from agent_retrieval.cli import main
from agent_retrieval.context import Context
from agent_retrieval.errors import ConfigError
from agent_retrieval.server.mcp_server import http_app


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::"])
def test_auth_off_is_refused_on_an_address_others_can_reach(host):
    with pytest.raises(ConfigError, match="serve on a loopback address"):
        http_app(Context(server_auth="off"), host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]"])
def test_auth_off_is_accepted_on_loopback(host):
    assert http_app(Context(server_auth="off"), host=host) is not None


def test_auth_on_without_a_way_to_check_tokens_is_refused_at_start():
    with pytest.raises(ConfigError, match="needs their tokens' issuer and key"):
        http_app(Context(), host="127.0.0.1")
    checked = Context(supabase_jwt_secret="s" * 32, supabase_jwt_issuer="https://x.supabase.co/auth/v1")
    assert http_app(checked, host="0.0.0.0") is not None


def test_the_cli_says_what_is_wrong_without_a_traceback(capsys, tmp_path):
    db = tmp_path / "store.db"
    assert main(["mcp", "--db", str(db), "--port", "70000"]) == 2
    assert main(["mcp", "--db", str(db)]) == 2  # reading a store that does not exist
    err = capsys.readouterr().err
    assert "--port must be 1 to 65535" in err and f"no store at {db}" in err and "Traceback" not in err
