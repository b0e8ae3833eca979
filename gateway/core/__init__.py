"""The query core: the session-query contract in plain Python.

Knows nothing of GraphQL or SQL; the persistence and GraphQL layers build on it.
"""

from .backend import PersistenceBackend
from .errors import ErrorCode, SessionQueryError
from .filters import Availability, EventFilter, SeqRange, SessionFilter, TimeRange
from .fold import EventSurface, FoldResult, Replacement, SurfaceFold, fold_surface
from .matching import RankKey, TextRange
from .model import SURFACE_TYPES, SessionEvent, SessionHeader
from .observation import Observation, SessionsPage
from .query import DEFAULT_READ_WINDOW_MAX, ScopedSessionQuery, SessionQuery
from .results import (
    EventRecord,
    EventTrace,
    LineageNode,
    ReadWindow,
    SessionRecord,
    SessionTrace,
)
from .scope import InvalidGrant, Scope
from .search import EventHit, EventSearchPage, SessionHit, SessionSearchPage
from .store import LiveSession, SessionStore
from .titles import SessionTitle, TitleSource
from .views import Classified, EventPage, Relations, SessionView

__all__ = [
    "DEFAULT_READ_WINDOW_MAX",
    "SURFACE_TYPES",
    "Availability",
    "Classified",
    "ErrorCode",
    "EventFilter",
    "EventHit",
    "EventPage",
    "EventRecord",
    "EventSearchPage",
    "EventSurface",
    "EventTrace",
    "FoldResult",
    "InvalidGrant",
    "LineageNode",
    "LiveSession",
    "Observation",
    "PersistenceBackend",
    "RankKey",
    "ReadWindow",
    "Relations",
    "Replacement",
    "Scope",
    "ScopedSessionQuery",
    "SeqRange",
    "SessionEvent",
    "SessionFilter",
    "SessionHeader",
    "SessionHit",
    "SessionQuery",
    "SessionQueryError",
    "SessionRecord",
    "SessionSearchPage",
    "SessionStore",
    "SessionTitle",
    "SessionTrace",
    "SessionView",
    "SessionsPage",
    "SurfaceFold",
    "TextRange",
    "TimeRange",
    "TitleSource",
    "fold_surface",
]
