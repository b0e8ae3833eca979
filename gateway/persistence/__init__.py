"""SQL persistence for the session-query gateway (SQLite embedded, PostgreSQL server).

`SqlPersistence` is the reference backend the query core mounts; `migrations`
manages the schema (Alembic); `checkpoint` persists the part of a live session
a backend lacks. Nothing here knows about GraphQL, and the core imports
nothing from here.
"""

from .checkpoint import checkpoint
from .engine import (
    ENV_DATABASE_URL,
    DatabaseUrlError,
    default_database_path,
    default_database_url,
    normalize_url,
)
from .errors import (
    InvalidEventError,
    NonContiguousAppendError,
    PersistenceError,
    SchemaVersionError,
    SessionConflictError,
    SessionExistsError,
    UnknownSessionError,
)
from .migrations import MigrationResult, SchemaState, head_revision, migrate
from .sql import ImportOutcome, SqlPersistence

__all__ = [
    "ENV_DATABASE_URL",
    "DatabaseUrlError",
    "ImportOutcome",
    "InvalidEventError",
    "MigrationResult",
    "NonContiguousAppendError",
    "PersistenceError",
    "SchemaState",
    "SchemaVersionError",
    "SessionConflictError",
    "SessionExistsError",
    "SqlPersistence",
    "UnknownSessionError",
    "checkpoint",
    "default_database_path",
    "default_database_url",
    "head_revision",
    "migrate",
    "normalize_url",
]
