"""Database URLs, the embedded default, and async engines with their timeouts.

Accepted URLs: `sqlite+aiosqlite:///path.db` and `postgresql+asyncpg://...`.
Plain `sqlite:///...`, `postgresql://...` and `postgres://...` are upgraded to
those async drivers; any other driver is refused.

SQLite connections run in WAL mode with foreign keys on, `synchronous=NORMAL`
and a busy timeout; SQLAlchemy (not the sqlite3 module) emits BEGIN, so reads
inside a transaction see one snapshot and DDL is transactional. Writers ask
for `BEGIN IMMEDIATE` (see `write_options`) so two writers queue on the busy
timeout instead of failing on a stale snapshot.

PostgreSQL connections have a connect timeout (asyncpg `timeout`), a client
`command_timeout` and a server-side `statement_timeout`, and the pool pings a
connection before handing it out, so a process recovers by itself once a
restarted server is reachable again.
"""

from __future__ import annotations

import json
import os
import re
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .errors import PersistenceError

ENV_DATABASE_URL = "SESSION_GATEWAY_DATABASE_URL"
"""Environment variable naming the database when `--database` is not given."""

SQLITE_DRIVER = "sqlite+aiosqlite"
POSTGRES_DRIVER = "postgresql+asyncpg"

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_STATEMENT_TIMEOUT = 30.0
DEFAULT_BUSY_TIMEOUT = 10.0

SQLITE_IMMEDIATE = "gateway_sqlite_immediate"
"""Execution option: begin this connection's transaction with BEGIN IMMEDIATE (SQLite)."""


class DatabaseUrlError(PersistenceError, ValueError):
    """A database URL this gateway cannot use."""


def default_database_path() -> Path:
    """Where the embedded SQLite database lives: `$XDG_DATA_HOME/session-gateway/sessions.db`
    (`~/.local/share/...` when XDG_DATA_HOME is unset)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "session-gateway" / "sessions.db"


def is_default_database(path: str | Path) -> bool:
    """Whether `path` is the embedded default database (the only SQLite file whose
    directory the gateway ever creates)."""
    return Path(path).absolute() == default_database_path().absolute()


def default_database_url() -> str:
    """`$SESSION_GATEWAY_DATABASE_URL` if set, else the embedded SQLite file."""
    configured = os.environ.get(ENV_DATABASE_URL, "").strip()
    if configured:
        return configured
    return f"{SQLITE_DRIVER}:///{default_database_path()}"


def normalize_url(url: str | URL) -> URL:
    """The async-driver URL for `url`, or DatabaseUrlError saying what is accepted."""
    if isinstance(url, str):
        text = url.strip()
        if text.startswith("postgres://"):
            text = "postgresql://" + text[len("postgres://") :]
        try:
            parsed = make_url(text)
        except ArgumentError as exc:
            raise DatabaseUrlError(
                f"not a database URL: {url!r} ({exc}); use sqlite+aiosqlite:///path.db "
                "or postgresql+asyncpg://user@host:port/dbname"
            ) from None
    else:
        parsed = url
    name = parsed.drivername
    if name in ("sqlite", SQLITE_DRIVER):
        return parsed.set(drivername=SQLITE_DRIVER)
    if name in ("postgresql", POSTGRES_DRIVER):
        return parsed.set(drivername=POSTGRES_DRIVER)
    raise DatabaseUrlError(
        f"unsupported database URL scheme {name!r}: use sqlite+aiosqlite:///path.db "
        "(or sqlite:///) or postgresql+asyncpg://user@host:port/dbname (or postgresql://)"
    )


def display_url(url: URL) -> str:
    """The URL as shown in messages: password hidden."""
    return url.render_as_string(hide_password=True)


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names, or None for in-memory and `file:` URI databases."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    if url.query.get("uri") in ("true", "1"):
        return None
    return Path(database)


# --------------------------------------------------------------------- JSON text

_SURROGATE = re.compile("[\ud800-\udfff]")
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder() -> Any:
    """json's C encoder with our settings, made once (JSONEncoder.encode makes one per call)."""
    if c_make_encoder is None:  # pragma: no cover - CPython always has it
        return None
    return c_make_encoder({}, _not_json, encode_basestring, None, ":", ",", False, False, False)


_fast_encode = _c_encoder()


def dumps_json(value: Any) -> str:
    """Compact JSON text, UTF-8 safe (a lone surrogate is written as its `\\uXXXX` escape).

    Raises TypeError/ValueError for values that are not JSON (NaN, sets, cycles, ...).
    """
    global _fast_encode
    if _fast_encode is None:  # pragma: no cover
        text: str = _encode(value)
    else:
        try:
            text = "".join(_fast_encode(value, 0))
        except BaseException:
            _fast_encode = _c_encoder()  # its cycle markers may hold stale ids now
            raise
    if _SURROGATE.search(text) is not None:
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


loads_json = json.loads


# ---------------------------------------------------------------------- engines


def create_engine(
    url: URL,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    echo: bool = False,
) -> AsyncEngine:
    """An async engine for a normalized URL, with the settings in the module docstring.

    `statement_timeout=None` means no statement timeout (migrations of big tables).
    """
    if is_sqlite(url):
        return _sqlite_engine(url, busy_timeout=busy_timeout, echo=echo)
    return _postgres_engine(
        url, connect_timeout=connect_timeout, statement_timeout=statement_timeout, echo=echo
    )


FTS_VOCAB_TABLE = "temp.event_vocab"
FTS_VOCAB_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.event_vocab "
    "USING fts5vocab(main, 'event_fts', 'instance')"
)
"""Every SQLite connection's view of the search index's positions (one row per token
instance: term, doc, col, offset). A one-token search counts its matches from it (an
index read) instead of `highlight()`, which re-tokenizes each matching text
(`gateway.persistence.search`). Temp and lazy: made before the index exists, it is
only resolved when queried, and it writes nothing to the database."""


def _sqlite_engine(url: URL, *, busy_timeout: float, echo: bool) -> AsyncEngine:
    engine = create_async_engine(
        url,
        echo=echo,
        connect_args={"timeout": busy_timeout},
    )
    busy_ms = int(busy_timeout * 1000)
    memory = sqlite_file(url) is None

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy emits BEGIN itself (below): the sqlite3 module's legacy mode would
        # run SELECTs outside any transaction and autocommit DDL.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            cursor.execute(FTS_VOCAB_DDL)
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(SQLITE_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def pg_connect_args(connect_timeout: float, statement_timeout: float | None) -> dict[str, Any]:
    """`asyncpg.connect`'s arguments for the gateway's connections (the engine's and the
    read pool's, `gateway.persistence.pg_readers`)."""
    server_settings = {"application_name": "session-gateway"}
    connect_args: dict[str, Any] = {"timeout": connect_timeout, "server_settings": server_settings}
    if statement_timeout is not None:
        server_settings["statement_timeout"] = str(max(1, int(statement_timeout * 1000)))
        # The client-side timeout also covers a server that stops answering mid-statement.
        connect_args["command_timeout"] = statement_timeout + connect_timeout
    return connect_args


def pool_timeout(connect_timeout: float, statement_timeout: float | None) -> float:
    """Seconds to wait for a pooled connection: one connect and one statement."""
    return connect_timeout + (statement_timeout or 0.0)


def _postgres_engine(
    url: URL, *, connect_timeout: float, statement_timeout: float | None, echo: bool
) -> AsyncEngine:
    return create_async_engine(
        url,
        echo=echo,
        connect_args=pg_connect_args(connect_timeout, statement_timeout),
        pool_pre_ping=True,
        pool_timeout=pool_timeout(connect_timeout, statement_timeout),
        json_serializer=dumps_json,
    )


def write_options(url: URL) -> dict[str, Any]:
    """Execution options for a connection that will write (BEGIN IMMEDIATE on SQLite)."""
    return {SQLITE_IMMEDIATE: True} if is_sqlite(url) else {}
