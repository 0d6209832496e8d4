"""Keeps configured keys out of every log record in the process, the provider SDKs' included, and out of
what a graph writes (`redact_value`, applied to every node's update at the graph's edge).

Some SDKs log a provider's error message verbatim, and a refused key is often named in it; so once a
Context holds a key, each new log record's message is checked for it and the key replaced. The check is one
log record factory, put in front of logging's when the first key is protected and never again; a Context
then only records the keys not protected yet.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agent_retrieval.core.process import PROCESS
from agent_retrieval.errors import ConfigError

MASK = "[redacted]"
MIN_SECRET_CHARS = 8  # shorter values ("k", "test") would mask ordinary words
RECENT_USER_TOKENS = 1024  # a server sees a new user token per sign-in: keep the latest, not every one

_secrets: frozenset[str] = frozenset()  # the operator's keys: few, kept for the life of the process
_recent: dict[str, None] = {}  # users' tokens, oldest first (a dict keeps insertion order)
_factory: _RedactingFactory | None = None  # the log record factory this module installed


def protect(*values: str, user_token: bool = False) -> None:
    """Redact these values from every log record created from now on (the empty or short are ignored).

    Users' tokens (`user_token=True`) are many and short-lived on a server, so only the most recent
    RECENT_USER_TOKENS are kept: the set, and the work each log record costs, stay bounded."""
    global _secrets, _recent
    new = {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - _secrets
    if not new or (user_token and new <= _recent.keys()):
        return
    with PROCESS.part("redaction lock", threading.Lock):  # a forked child's own: one may be held at the fork
        if user_token:
            recent = {**_recent, **dict.fromkeys(new)}
            _recent = dict(list(recent.items())[-RECENT_USER_TOKENS:])
        else:
            _secrets = _secrets | new
        _install()


def check_secret(name: str, value: str, *, header: bool = True) -> str:
    """A configured key, token or password with surrounding whitespace removed (a value read from a file
    often ends in a newline), refused when it still holds a character no HTTP header may carry (any
    control character, for a password that travels in no header). The error names the setting, never
    the value."""
    value = value.strip()
    bad = next((c for c in value if not (" " <= c <= "~" if header else c.isprintable())), None)
    if bad is not None:
        raise ConfigError(
            f"{name} holds a character no key or token contains (U+{ord(bad):04X}); copy the "
            "value again, without line breaks"
        )
    return value


def fingerprint(secret: str) -> str:
    """A short one-way digest of a secret: tells keys apart (cache keys) without holding or showing one."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()[:16] if secret else ""


def endpoint_id(base_url: str | None, key: str | None) -> str:
    """Where a provider is reached and with which key, as a fingerprint: safe to keep in a cache key."""
    return f"{base_url or ''}|{fingerprint(key or '')}"


def redact(text: str) -> str:
    """The text with every protected value masked."""
    for secret in (*_secrets, *_recent):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_value(value: Any) -> Any:
    """`value` with every protected value masked in each string it holds: in dicts, lists, tuples and
    pydantic models (LangChain's messages) at any depth, copied; anything else is returned as it is."""
    if not (_secrets or _recent):
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(key): redact_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_value(item) for item in value)
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return value.model_copy(update={name: redact_value(getattr(value, name)) for name in fields})
    return value


def dsn_password(dsn: str) -> str:
    """The password in a postgresql:// URI, or '' (key=value DSNs are protected whole)."""
    try:
        return urllib.parse.urlsplit(dsn).password or ""
    except ValueError:
        return ""


class _RedactingFactory:
    """The log record factory that masks protected values in what `previous` (logging's factory) makes."""

    def __init__(self, previous: Callable[..., logging.LogRecord]):
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return record
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return record


def _install() -> None:
    """Put the redacting factory in front of logging's, once per process (a factory set later may wrap it)."""
    global _factory
    if _factory is None:
        _factory = _RedactingFactory(logging.getLogRecordFactory())
        logging.setLogRecordFactory(_factory)
