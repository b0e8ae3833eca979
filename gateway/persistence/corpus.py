"""Corpus questions by index (`gateway.core.backend.CorpusReads`) for `SqlPersistence`.

Work in progress: filled in by the pushdown work of issue 8.
"""

from __future__ import annotations

from .base import SqlBase


class SqlCorpusReads(SqlBase):
    """Keyset pages, counts, children and lineage of the stored corpus."""
