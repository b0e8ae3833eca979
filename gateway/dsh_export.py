"""Export sessions as dsh JSONL artifacts (SPEC §15), streamed.

The artifact is the format `gateway.dsh_jsonl` reads (SPEC §9): the header
line, then one line per event, except that every maximal run of three or
more consecutive `assistant/chunk` events a packed row can hold exactly
becomes one chunk row (`gateway.dsh_jsonl.ChunkPacker` decides, the same
rules the reader's own writer follows), so `import` of an export gives back
the same header and events.

A session is exported as the observation sees it: a live one as its live log
stood when the observation first touched it, a stored one as its stored log.
The log is read page by page (`Observation.log_slice`, nothing remembered)
and each page is encoded (and, for an archive, compressed) off the event loop;
memory follows the page and the longest run of chunks, never the log, so a
100k-event session is never one string.

`?descendants=true` and `--descendants` answer a zip: `session.jsonl`, then
each visible descendant, depth first with siblings by createdAt then id (the
order of `traceSession.descendants`), at `subagents/<id>/session.jsonl` with
every character of the id outside `[A-Za-z0-9_-]` written `_` (two ids that
differ only there would share a name: the zip then holds both, in order).

An event whose type is a packed-row tag (`text-chunks`, ...) cannot be written
as itself (it would read back as a row): such a log is refused with
`UnexportableLog`: before anything is sent when it is in the first page of the
exported session (the HTTP route awaits that page before it answers), else the
stream stops there.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import zipfile
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from gateway.core import Observation, SessionEvent, SessionHeader
from gateway.core.query import trace_session
from gateway.core.results import LineageNode
from gateway.dsh_jsonl import ChunkPacker, dump_line, header_line

PAGE_EVENTS = 500
"""Events read and encoded per step of a streamed export."""

ROOT_ENTRY = "session.jsonl"
JSONL_MEDIA_TYPE = "application/x-ndjson"
ZIP_MEDIA_TYPE = "application/zip"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_ZIP_EPOCH = dt.datetime(1980, 1, 1, tzinfo=dt.UTC)


class UnexportableLog(ValueError):
    """A log holding an event that no artifact line can stand for."""


def safe_name(session_id: str) -> str:
    """`session_id` with every character outside `[A-Za-z0-9_-]` written `_`."""
    return _UNSAFE.sub("_", session_id)


def entry_name(session_id: str) -> str:
    """Where a descendant's artifact lies in an archive."""
    return f"subagents/{safe_name(session_id)}/session.jsonl"


class ArtifactEncoder:
    """The lines of one artifact, fed the log in pages (see `ChunkPacker`)."""

    __slots__ = ("_packer",)

    def __init__(self) -> None:
        self._packer = ChunkPacker()

    def page(self, events: Iterable[SessionEvent]) -> str:
        """The lines these events complete (a run of chunks may wait for the next page)."""
        feed = self._packer.feed
        try:
            return "".join(dump_line(r) for e in events for r in feed(e))
        except ValueError as exc:
            raise UnexportableLog(str(exc)) from None

    def finish(self) -> str:
        return "".join(dump_line(r) for r in self._packer.finish())


def artifact_lines(header: SessionHeader, events: Iterable[SessionEvent]) -> Iterator[str]:
    """An artifact's lines, each with its newline, from an iterable log (the sync form)."""
    yield header_line(header)
    encoder = ArtifactEncoder()
    for event in events:
        text = encoder.page((event,))
        if text:
            yield text
    tail = encoder.finish()
    if tail:
        yield tail


@dataclass(frozen=True, slots=True)
class ExportedLog:
    """One session to export: its header and log length, as the observation proved them."""

    header: SessionHeader
    length: int


async def _pages(obs: Observation, log: ExportedLog) -> AsyncIterator[list[SessionEvent]]:
    for lo in range(0, log.length, PAGE_EVENTS):
        yield await obs.log_slice(log.header.id, lo, lo + PAGE_EVENTS - 1)


def _descendants_in_order(nodes: list[LineageNode]) -> list[str]:
    """The ids of a descendant tree, depth first, siblings in their given order (no
    recursion: chains thousands deep)."""
    out: list[str] = []
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        out.append(node.session.header.id)
        stack.extend(reversed(node.descendants))
    return out


@dataclass(frozen=True, slots=True)
class Export:
    """A proved export, ready to stream: the root session and, for an archive, its
    visible descendants in archive order. `chunks()` yields the body."""

    obs: Observation
    root: ExportedLog
    descendants: tuple[ExportedLog, ...] | None

    @property
    def archive(self) -> bool:
        return self.descendants is not None

    @property
    def media_type(self) -> str:
        return ZIP_MEDIA_TYPE if self.archive else JSONL_MEDIA_TYPE

    @property
    def filename(self) -> str:
        return safe_name(self.root.header.id) + (".zip" if self.archive else ".jsonl")

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body, a page at a time. The first chunk holds the root's header line and
        its first page: a caller that awaits it before answering (the HTTP route) turns
        a first page no artifact can hold into an error response, not a cut stream."""
        if self.descendants is None:
            async for text in self._artifact(self.root):
                yield text.encode("utf-8")
            return
        archive = _ZipStream()
        logs = [(ROOT_ENTRY, self.root)] + [(entry_name(d.header.id), d) for d in self.descendants]
        for name, log in logs:
            await asyncio.to_thread(archive.open, name, log.header.created_at)
            async for text in self._artifact(log):
                yield await asyncio.to_thread(archive.write, text)  # maybe b"": deflate buffers
            yield await asyncio.to_thread(archive.close_entry)
        yield await asyncio.to_thread(archive.finish)

    async def _artifact(self, log: ExportedLog) -> AsyncIterator[str]:
        """One artifact's text: the header line with the first page, then a page a step."""
        encoder = ArtifactEncoder()
        text = header_line(log.header)
        async for events in _pages(self.obs, log):
            text += await asyncio.to_thread(encoder.page, events)
            if text:
                yield text
            text = ""
        text += encoder.finish()
        if text:
            yield text


async def open_export(obs: Observation, session_id: str, *, descendants: bool = False) -> Export:
    """Prove what an export of `session_id` sends, before any of it is sent.

    SESSION_NOT_FOUND for an absent or invisible id (the observation's scope
    decides, exactly as for every read), INVALID_LINEAGE for a cycle below it,
    PERSISTENCE_FAILED as usual; `UnexportableLog` for a first page no artifact
    can hold is raised by the first chunk of `Export.chunks()`.
    """
    header, length = await obs.log_extent(session_id)
    below: tuple[ExportedLog, ...] | None = None
    if descendants:
        trace = await trace_session(obs, session_id)
        ids = _descendants_in_order(trace.descendants)
        extents = await asyncio.gather(*(obs.log_extent(i) for i in ids))
        below = tuple(ExportedLog(h, n) for h, n in extents)
    return Export(obs, ExportedLog(header, length), below)


class _ZipStream:
    """A zip archive written to memory entry by entry and drained as it grows: zipfile
    writes to an unseekable stream with data descriptors, so nothing is held but the
    bytes not yet drained. Used from one thread at a time."""

    def __init__(self) -> None:
        self._out = _Sink()
        self._zip = zipfile.ZipFile(self._out, mode="w", compression=zipfile.ZIP_DEFLATED)
        self._file: IO[bytes] | None = None

    def open(self, name: str, created_at: int) -> None:
        when = max(dt.datetime.fromtimestamp(created_at / 1000, dt.UTC), _ZIP_EPOCH)
        info = zipfile.ZipInfo(name, date_time=when.timetuple()[:6])
        info.compress_type = zipfile.ZIP_DEFLATED
        self._file = self._zip.open(info, mode="w")

    def write(self, text: str) -> bytes:
        assert self._file is not None
        self._file.write(text.encode("utf-8"))
        return self._out.drain()

    def close_entry(self) -> bytes:
        assert self._file is not None
        self._file.close()
        self._file = None
        return self._out.drain()

    def finish(self) -> bytes:
        self._zip.close()
        return self._out.drain()


class _Sink:
    """The unseekable file `_ZipStream` writes to: bytes wait here until drained."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes, /) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def drain(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data
