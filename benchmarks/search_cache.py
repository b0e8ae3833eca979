"""Where `bench_search` keeps the databases it builds, so that a second run is quick.

A built database is the writer's output for given generator parameters, so it
is keyed by those parameters and by a fingerprint of the code that decides its
rows (`_WRITER_FILES`: the writer, codec, schema and migrations, §13's text and
tokens, the fold, the generator): a change to one of them builds afresh, a
change to a read path does not (`--rebuild` forces it).

SQLite databases are files `NAME-KEY.db` (written as `.part`, renamed when
complete). PostgreSQL ones are databases `b_NAME_KEY` in one cluster kept in
the cache directory (`CachedCluster`, started on a free loopback port for each
run and stopped after it), marked complete by a file. Older keys of the same
NAME are dropped when a new one is built, so the cache holds one generation.
The cache lives under `$BENCH_SEARCH_CACHE`, default
`$TMPDIR/bench-search-cache`; delete it to start over.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tests.support.postgres import (
    _SETTINGS,
    PostgresServer,
    _postmaster_alive,
    _tail,
)

ROOT = Path(__file__).resolve().parent.parent
_WRITER_FILES = (
    "gateway/persistence/writes.py",
    "gateway/persistence/codec.py",
    "gateway/persistence/texts.py",
    "gateway/persistence/tables.py",
    "gateway/persistence/migrations.py",
    "migrations/**/*.py",
    "gateway/core/event_text.py",
    "gateway/core/words.py",
    "gateway/core/fold.py",
    "gateway/core/model.py",
    "gateway/core/jsonvalue.py",
    "benchmarks/search_data.py",
)
"""What decides the rows of a built database: the writer, its encoding and schema, the
text and tokens of §13, the fold it validates with, and the generator. Read paths
(search, pages) are not in it: changing them must not cost a rebuild."""


def cache_root() -> Path:
    default = Path(tempfile.gettempdir()) / "bench-search-cache"
    root = Path(os.environ.get("BENCH_SEARCH_CACHE", default))
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the cluster's server user must be able to enter it
    return root


def code_fingerprint() -> str:
    """A digest of the code a built database depends on."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in _WRITER_FILES for p in ROOT.glob(pattern)})
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(params: Mapping[str, object]) -> str:
    text = json.dumps(dict(params), sort_keys=True) + code_fingerprint()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SqliteCache:
    """Built SQLite files by name and key, with a JSON sidecar of facts about each."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "sqlite"
        self.dir.mkdir(exist_ok=True)

    def path(self, name: str, key: str) -> Path:
        return self.dir / f"{name}-{key}.db"

    def ready(self, name: str, key: str) -> bool:
        return self.path(name, key).exists() and self.meta_path(name, key).exists()

    def meta_path(self, name: str, key: str) -> Path:
        return self.dir / f"{name}-{key}.json"

    def building(self, name: str, key: str) -> Path:
        """A fresh `.part` file to build into (older generations of `name` removed)."""
        for old in self.dir.glob(f"{name}-*"):
            old.unlink(missing_ok=True)
        part = self.path(name, key).with_suffix(".part")
        part.unlink(missing_ok=True)
        return part

    def done(self, name: str, key: str, meta: Mapping[str, object]) -> None:
        part = self.path(name, key).with_suffix(".part")
        con = sqlite3.connect(part)  # fold the WAL into the file before it is renamed
        try:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            con.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{part}{suffix}").unlink(missing_ok=True)
        part.rename(self.path(name, key))
        self.meta_path(name, key).write_text(json.dumps(dict(meta)))

    def meta(self, name: str, key: str) -> dict[str, object]:
        result: dict[str, object] = json.loads(self.meta_path(name, key).read_text())
        return result


class CachedCluster(PostgresServer):
    """A PostgreSQL cluster whose data directory stays in the cache between runs.

    The tests' throwaway cluster (`tests.support.postgres.PostgresServer`) with
    a fixed root: `start()` reuses the data directory when it exists (initdb
    only the first time), on a free port each run; `stop()` ends the server and
    keeps the data. The root's name is not the tests' prefix, so their reaper
    of stale clusters leaves it alone.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(base_dir=root.parent, timeout=60.0)
        self.fixed_root = root

    def start(self) -> None:
        if self.root is None and (self.fixed_root / "data").exists():
            self.root = self.fixed_root
            if _postmaster_alive(self.data_dir):  # left running by a killed run of ours
                self.stop()
        atexit.register(self.stop)
        super().start()

    def _initdb(self) -> None:
        root = self.fixed_root
        if root.exists():
            import shutil

            shutil.rmtree(root)
        root.mkdir(parents=True)
        self.root = root
        if self._user is not None:
            os.chown(root, self._user.pw_uid, self._user.pw_gid)
        result = self._run(
            "initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--no-sync", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {_tail(result.stdout + result.stderr)}")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS.format(socket_dir=root))
            conf.write("shared_buffers = '512MB'\nmax_wal_size = '4GB'\n")

    # -- built databases ------------------------------------------------------------

    def database_name(self, name: str, key: str) -> str:
        return f"b_{re.sub('[^a-z0-9_]', '_', name.lower())}_{key}"

    def _marker(self, dbname: str) -> Path:
        return self.fixed_root / "built" / dbname

    def ready(self, name: str, key: str) -> bool:
        dbname = self.database_name(name, key)
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{dbname}'").strip()
        return exists == "1" and self._marker(dbname).exists()

    def building(self, name: str, key: str) -> str:
        """A fresh, empty database for `name` (older generations dropped); its URL."""
        prefix = self.database_name(name, "")
        listed = self.psql("SELECT datname FROM pg_database").split()
        for old in listed:
            if old.startswith(prefix):
                self.drop_database(old)
                self._marker(old).unlink(missing_ok=True)
        dbname = self.database_name(name, key)
        self.create_database(dbname)
        return self.url(dbname)

    def done(self, name: str, key: str, meta: Mapping[str, object]) -> None:
        marker = self._marker(self.database_name(name, key))
        marker.parent.mkdir(exist_ok=True)
        marker.write_text(json.dumps(dict(meta)))

    def meta(self, name: str, key: str) -> dict[str, object]:
        result: dict[str, object] = json.loads(
            self._marker(self.database_name(name, key)).read_text()
        )
        return result

    def database_url(self, name: str, key: str) -> str:
        return self.url(self.database_name(name, key))
