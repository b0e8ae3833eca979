"""The query core: the session-query contract in plain Python.

Knows nothing of GraphQL or SQL; the persistence and GraphQL layers build on it.
"""

from .backend import PersistenceBackend
from .errors import ErrorCode, SessionQueryError
from .fold import EventSurface, FoldResult, Replacement, SurfaceFold, fold_surface
from .model import SURFACE_TYPES, SessionEvent, SessionHeader
from .observation import Observation, SessionLog
from .query import DEFAULT_READ_WINDOW_MAX, SessionQuery
from .results import (
    EventRecord,
    EventTrace,
    LineageNode,
    ReadWindow,
    SessionRecord,
    SessionTrace,
)
from .store import LiveSession, SessionStore

__all__ = [
    "DEFAULT_READ_WINDOW_MAX",
    "SURFACE_TYPES",
    "ErrorCode",
    "EventRecord",
    "EventSurface",
    "EventTrace",
    "FoldResult",
    "LineageNode",
    "LiveSession",
    "Observation",
    "PersistenceBackend",
    "ReadWindow",
    "Replacement",
    "SessionEvent",
    "SessionHeader",
    "SessionLog",
    "SessionQuery",
    "SessionQueryError",
    "SessionRecord",
    "SessionStore",
    "SessionTrace",
    "SurfaceFold",
    "fold_surface",
]
