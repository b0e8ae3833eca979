"""Reads of the fold's stored derivations (`gateway.core.backend.DerivedReads`).

Work in progress: filled in by the pushdown work of issue 8.
"""

from __future__ import annotations

from .base import SqlBase


class SqlDerivedReads(SqlBase):
    """Pages of classified events, single events, surfaces and traces by index."""
