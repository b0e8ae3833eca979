"""Read and write dsh JSONL session artifacts (SPEC §9).

An artifact is one UTF-8 file per session. Line 1 is the header object tagged
``"type": "session"``; every other line is either one event or a *packed row*
standing for a run of ``assistant/chunk`` stream deltas::

    {"type": "text-chunks" | "reasoning-chunks" | "tool-call-chunks",
     "seq0": S, "time0": T,
     "data": {"turn", "step", "index", "dt": [...],
              "texts": [...]                      # text- and reasoning-chunks
              | "id", "name"?, "args": [...]}}    # tool-call-chunks

Member *k* is the event ``{type: "assistant/chunk", seq: S + k, time: T +
sum(dt[:k]), data: {turn, step, chunk}}``: ``dt`` holds the gaps between
consecutive members, so ``len(dt) == members - 1`` (true of every row in the
real corpus, and what the harness itself demands).

Decisions, following the harness that writes these files (its ``chunk-rows``
codec) and the 120 real artifacts in ``tests/data/dsh-jsonl``:

- A packed row is validated exactly: envelope keys exactly ``type, seq0,
  time0, data``; data keys exactly as above; ``turn``/``step``/``index``,
  ``seq0`` (>= 0), ``time0`` and every ``dt`` are integers within JSON's safe
  range (±(2**53 - 1)), as are the member seqs and times; members are a
  non-empty list of strings. A ``dt`` gap may be *negative*: the harness allows
  it and three corpus files contain such rows, so time order is not a format
  rule (nothing else in the format promises monotonic times either).
- ``name`` of a tool-call row is carried by *every* member's chunk (or by
  none), as the harness expands it and as every unpacked tool-call delta in
  the corpus carries it. The writer therefore packs only runs whose members
  agree on ``id`` and on ``name`` (present with the same value, or absent).
- The writer packs maximal runs of at least three consecutive, same-kind,
  same ``turn``/``step``/``index`` deltas with consecutive seqs, exactly like
  the harness (shorter runs stay plain lines; both forms read back the same).
  A chunk with any extra key, ``ignorable``, ``surfaceOp`` or
  ``sourceEventSeqs`` is written as a plain line, so packing never loses data.
- Torn final record: the harness appends newline-terminated records and drops
  an unterminated tail on load. So when the file does not end with a newline
  and its last line is not JSON, that line is discarded with a warning. A
  non-JSON line anywhere else, or a complete (newline-terminated) last line
  that is not JSON, is an error naming the line. Invalid UTF-8 confined to
  such a torn tail is a torn record too; anywhere else it is an error.
- Blank (whitespace-only) lines after the header carry nothing and the
  harness's readers skip them, so they are skipped with a warning rather than
  refused. Line 1 must be the header itself.
- Only format version 0 is read; a header without ``version`` reads as 0.
- Events keep file order after expansion; whether seqs are contiguous is for
  the surface fold to judge, not the reader.

This module is pure: stdlib and ``gateway.core`` only.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from os import PathLike
from typing import Any, BinaryIO

from gateway.core.ids import id_problem, text_problem
from gateway.core.model import SessionEvent, SessionHeader

__all__ = [
    "Artifact",
    "ArtifactError",
    "ChunkPacker",
    "dump_line",
    "dumps_artifact",
    "header_line",
    "pack_records",
    "parse_artifact",
    "read_artifact",
]

SUPPORTED_VERSION = 0
MAX_SAFE_INT = 2**53 - 1
"""The largest integer a JSON reader written in JavaScript (the harness) keeps exact."""

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest line read (its newline not counted): a longer one refuses the file."""

MIN_PACKED_RUN = 3
"""The harness packs runs of at least this many deltas; shorter runs stay plain lines."""

_CHUNK_EVENT = "assistant/chunk"
_TEXT_ROWS = {"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta"}
_TOOL_ROW = "tool-call-chunks"
_TOOL_DELTA = "tool-call-delta"
_ROW_FOR_DELTA = {**{delta: row for row, delta in _TEXT_ROWS.items()}, _TOOL_DELTA: _TOOL_ROW}
_ROW_TYPES = frozenset(_ROW_FOR_DELTA.values())

_ENVELOPE_KEYS = frozenset({"type", "seq0", "time0", "data"})
_TEXT_DATA_KEYS = frozenset({"turn", "step", "index", "dt", "texts"})
_TOOL_DATA_KEYS = frozenset({"turn", "step", "index", "dt", "id", "args"})
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_JSON: Any = object()
"""What `_loads` returns for a line that is not JSON (a JSON `null` is a value)."""


class ArtifactError(ValueError):
    """An artifact that cannot be read; `path` and 1-based `line` say where."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        return _located(self.message, self.path, self.line)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (self.message, self.path, self.line))


def _rebuild_error(message: str, path: str | None, line: int | None) -> ArtifactError:
    return ArtifactError(message, path=path, line=line)


@dataclass(frozen=True)
class Artifact:
    """A parsed artifact: header, events in file order, and what was tolerated."""

    header: SessionHeader
    events: tuple[SessionEvent, ...]
    warnings: tuple[str, ...] = ()


def _located(message: str, path: str | None, line: int | None) -> str:
    if path is not None and line is not None:
        return f"{path}:{line}: {message}"
    if path is not None:
        return f"{path}: {message}"
    if line is not None:
        return f"line {line}: {message}"
    return message


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _is_safe_int(value: object) -> bool:
    """An int (never a bool) that a JavaScript reader keeps exact."""
    return type(value) is int and -MAX_SAFE_INT <= value <= MAX_SAFE_INT


# --------------------------------------------------------------------- reading


def read_artifact(
    path: str | PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Artifact:
    """Read and parse the artifact at `path`, line by line (UTF-8; an OSError propagates).

    Only regular files are read: a FIFO would block forever, a device such as
    /dev/zero never ends, a directory is no artifact. A line longer than
    `max_line_bytes` (its newline not counted) is refused before it is held in
    memory whole.
    """
    name = str(path)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise ArtifactError(
            f"not a regular file ({_file_kind(mode)}): only regular artifact files are read, "
            "since a pipe or device can block or never end",
            path=name,
        )
    with open(path, "rb") as file:
        return _parse_lines(_file_lines(file, name, max_line_bytes), name)


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a file"


_Line = tuple[int, "str | None", bool]
"""(1-based number, its text (a trailing newline may remain) or None when not UTF-8,
newline-terminated)."""


def _file_lines(file: BinaryIO, path: str, limit: int) -> Iterator[_Line]:
    offset = 0
    number = 0
    while True:
        raw = file.readline(limit + 1)
        if not raw:
            return
        number += 1
        terminated = raw.endswith(b"\n")
        if len(raw) > limit and not terminated:
            raise ArtifactError(
                f"line is longer than the limit of {limit:,} bytes (--max-line-bytes)",
                path=path,
                line=number,
            )
        size = len(raw)
        try:
            line: str | None = raw.decode("utf-8")  # its newline stays: JSON allows it
        except UnicodeDecodeError as exc:
            if terminated or number == 1:
                at = offset + exc.start
                raise ArtifactError(
                    f"not UTF-8: byte {raw[exc.start]:#04x} at offset {at}", path=path, line=number
                ) from None
            line = None
        del raw  # one copy of a long line at a time: the text, then what JSON makes of it
        yield number, line, terminated
        offset += size


def _text_lines(text: str) -> Iterator[_Line]:
    lines = text.split("\n")  # not splitlines(): JSON strings may hold U+2028 and friends
    last = len(lines) - 1
    for index, line in enumerate(lines):
        if index == last and line == "":
            return  # the newline that terminates the last record
        yield index + 1, line, index < last


def _blank(line: str) -> bool:
    return not line or line.isspace()  # not strip(): that copies a long line


def parse_artifact(text: str, *, path: str | None = None) -> Artifact:
    """Parse an artifact's text: the header, then events in file order.

    Raises ArtifactError naming the line for anything the module docstring
    does not tolerate; tolerated oddities come back in `warnings`.
    """
    return _parse_lines(_text_lines(text), path)


def _parse_lines(lines: Iterable[_Line], path: str | None) -> Artifact:
    warnings: list[str] = []
    header: SessionHeader | None = None
    events: list[SessionEvent] = []
    blank: list[int] = []
    for number, line, terminated in lines:
        if header is None:
            if line is None:  # pragma: no cover - _file_lines raises for line 1
                raise ArtifactError("not UTF-8", path=path, line=1)
            header = _parse_header(line, path)
            continue
        if not terminated and (line is None or (not _blank(line) and _loads(line) is _NOT_JSON)):
            why = "not UTF-8" if line is None else "no newline, not JSON"
            warnings.append(_located(f"discarded a torn final record ({why})", path, number))
            break
        assert line is not None
        if _blank(line):
            blank.append(number)
            continue
        events.extend(_parse_record(line, path, number))
    if header is None:
        raise ArtifactError("empty artifact: no session header", path=path, line=1)
    if blank:
        warnings.append(_located(f"skipped blank line(s) {_first_few(blank)}", path, None))
    return Artifact(header, tuple(events), tuple(warnings))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""One strict decoder for every line (`json.loads` with an option builds one per call)."""


def _loads(line: str) -> Any:
    """The JSON value of `line`, or `_NOT_JSON` (NaN and Infinity are not JSON)."""
    try:
        return _DECODER.decode(line)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _parse_header(line: str, path: str | None) -> SessionHeader:
    if line.startswith("\ufeff"):
        raise ArtifactError(
            "line 1 starts with a UTF-8 byte order mark (bytes EF BB BF): artifacts are "
            "UTF-8 without one; remove those three bytes",
            path=path,
            line=1,
        )
    obj = _loads(line)
    if not isinstance(obj, dict):
        what = "is not JSON" if obj is _NOT_JSON else "is not a JSON object"
        raise ArtifactError(f"line 1 {what}; expected the session header", path=path, line=1)
    if obj.get("type") != "session":
        raise ArtifactError(
            f'header is not tagged "type": "session" (got {obj.get("type")!r})', path=path, line=1
        )
    try:
        header = SessionHeader.from_json(obj)
    except ValueError as exc:
        raise ArtifactError(f"invalid session header: {exc}", path=path, line=1) from None
    for name in ("id", "parent_session", "cwd", "origin", "agent_preset"):
        value = getattr(header, name)
        problem = id_problem(value) if name == "id" else value and text_problem(value)
        if problem:
            raise ArtifactError(f"header field {_camel(name)} {problem}", path=path, line=1)
    if header.version != SUPPORTED_VERSION:
        raise ArtifactError(
            f"format version {header.version} is not supported (only {SUPPORTED_VERSION})",
            path=path,
            line=1,
        )
    return header


def _parse_record(line: str, path: str | None, number: int) -> list[SessionEvent]:
    obj = _loads(line)
    if obj is _NOT_JSON:
        raise ArtifactError("not a JSON record", path=path, line=number)
    if isinstance(obj, dict) and obj.get("type") == "session":
        raise ArtifactError(
            "a second session header: an artifact holds one session, whose header is line 1",
            path=path,
            line=number,
        )
    kind = obj.get("type") if isinstance(obj, dict) else None
    if isinstance(kind, str) and (problem := text_problem(kind)) is not None:
        raise ArtifactError(f"event type {problem}", path=path, line=number)
    if isinstance(obj, dict) and isinstance(obj.get("type"), str) and obj["type"] in _ROW_TYPES:
        try:
            return _expand_row(obj)
        except ValueError as exc:
            raise ArtifactError(
                f"malformed {obj['type']} row: {exc}", path=path, line=number
            ) from None
    try:
        return [SessionEvent.from_json(obj)]
    except ValueError as exc:
        raise ArtifactError(f"invalid event: {exc}", path=path, line=number) from None


def _first_few(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


# ------------------------------------------------------------ packed-row codec


def _expand_row(row: dict[str, Any]) -> list[SessionEvent]:
    """The `assistant/chunk` events a validated packed row stands for."""
    members, chunk_base = _validate_row(row)
    data, seq0 = row["data"], row["seq0"]
    member_key = "argumentsDelta" if row["type"] == _TOOL_ROW else "text"
    events: list[SessionEvent] = []
    for k, (member, time) in enumerate(zip(members, _member_times(row), strict=True)):
        chunk = {**chunk_base, member_key: member}
        payload = {"turn": data["turn"], "step": data["step"], "chunk": chunk}
        events.append(SessionEvent(type=_CHUNK_EVENT, seq=seq0 + k, time=time, data=payload))
    return events


def _member_times(row: dict[str, Any]) -> Iterator[int]:
    time: int = row["time0"]
    yield time
    for gap in row["data"]["dt"]:
        time += gap
        yield time


def _validate_row(row: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Check a packed row exactly; return its members and the chunk fields they share."""
    _require_keys("row", row, _ENVELOPE_KEYS)
    if not _is_safe_int(row["seq0"]) or row["seq0"] < 0:
        raise ValueError(f"seq0 must be a non-negative integer, got {row['seq0']!r}")
    if not _is_safe_int(row["time0"]):
        raise ValueError(f"time0 must be an integer (epoch ms), got {row['time0']!r}")
    data = row["data"]
    if not isinstance(data, dict):
        raise ValueError(f"data must be an object, got {type(data).__name__}")
    if row["type"] == _TOOL_ROW:
        members, chunk_base = _validate_tool_data(data)
    else:
        _require_keys("data", data, _TEXT_DATA_KEYS)
        members = _strings("texts", data["texts"])
        chunk_base = {"type": _TEXT_ROWS[row["type"]], "index": data["index"]}
    for key in ("turn", "step", "index"):
        if not _is_safe_int(data[key]):
            raise ValueError(f"{key} must be an integer, got {data[key]!r}")
    _validate_dt(data["dt"], len(members))
    if row["seq0"] + len(members) - 1 > MAX_SAFE_INT:
        raise ValueError("member seqs exceed the safe integer range")
    if not all(_is_safe_int(t) for t in _member_times(row)):
        raise ValueError("member times leave the safe integer range")
    return members, chunk_base


def _validate_tool_data(data: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    has_name = "name" in data
    _require_keys("data", data, _TOOL_DATA_KEYS | ({"name"} if has_name else set()))
    if not isinstance(data["id"], str):
        raise ValueError(f"id must be a string, got {data['id']!r}")
    if has_name and not isinstance(data["name"], str):
        raise ValueError(f"name must be a string, got {data['name']!r}")
    chunk_base: dict[str, Any] = {"type": _TOOL_DELTA, "index": data["index"], "id": data["id"]}
    if has_name:
        chunk_base["name"] = data["name"]
    return _strings("args", data["args"]), chunk_base


def _require_keys(what: str, obj: dict[str, Any], expected: frozenset[str] | set[str]) -> None:
    missing, extra = expected - obj.keys(), obj.keys() - expected
    if missing or extra:
        problems = [f"missing {sorted(missing)}"] if missing else []
        problems += [f"unexpected {sorted(extra)}"] if extra else []
        raise ValueError(f"{what} keys: {'; '.join(problems)}")


def _strings(key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a non-empty list of strings")
    return value


def _validate_dt(dt: object, members: int) -> None:
    if not isinstance(dt, list) or not all(_is_safe_int(gap) for gap in dt):
        raise ValueError("dt must be a list of integer gaps (ms)")
    if len(dt) != members - 1:
        raise ValueError(f"dt has {len(dt)} gaps for {members} members (needs {members - 1})")


# --------------------------------------------------------------------- writing


def dumps_artifact(
    header: SessionHeader, events: Iterable[SessionEvent], *, pack_chunks: bool = True
) -> str:
    """The artifact text for `header` and `events`: the inverse of `parse_artifact`.

    Every line is compact JSON ending in a newline. With `pack_chunks`, runs of
    stream deltas become packed rows as the harness writes them. Raises
    ValueError for an event whose type is a packed-row tag (it would read
    back as a row) and TypeError for data that is not JSON. (For a log too long
    to hold as one string, `gateway.dsh_export` streams the same lines.)
    """
    log = list(events)
    for event in log:
        check_exportable(event)
    lines = [header_line(header)]
    records = pack_records(log) if pack_chunks else (event_record(event) for event in log)
    lines.extend(dump_line(record) for record in records)
    return "".join(lines)


def check_exportable(event: SessionEvent) -> None:
    """ValueError when `event` cannot be written as a line (its type is a packed-row tag,
    so it would read back as a row, not as itself)."""
    if event.type in _ROW_TYPES:
        raise ValueError(f"event seq {event.seq!r} has type {event.type!r}, a packed-row tag")


def header_line(header: SessionHeader) -> str:
    """Line 1 of an artifact: the header tagged `"type": "session"`, with its newline."""
    return dump_line({"type": "session", **header.to_json()})


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""One encoder for every line (`json.dumps` with options builds one per call)."""


def dump_line(record: dict[str, Any]) -> str:
    """One record as compact JSON and its newline; lone surrogates escaped (as
    JavaScript does) so the text encodes as UTF-8."""
    line = _ENCODER.encode(record)
    if not line.isascii():  # only then can it hold a surrogate
        line = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)
    return line + "\n"


def event_record(event: SessionEvent) -> dict[str, Any]:
    """`event.to_json()` without the copy of its data: a record to encode at once, for
    logs too long to copy event by event."""
    out: dict[str, Any] = {"type": event.type, "seq": event.seq, "time": event.time}
    out["data"] = event.data
    if event.surface_op is not None:
        out["surfaceOp"] = event.surface_op
    if event.source_event_seqs is not None:
        src = event.source_event_seqs
        out["sourceEventSeqs"] = list(src) if isinstance(src, tuple) else src
    if event.ignorable:
        out["ignorable"] = True
    return out


class ChunkPacker:
    """The records of a log fed event by event: every maximal packable run of at least
    MIN_PACKED_RUN stream deltas becomes one packed row, everything else its own record.

    Only the current run is held (a run is one line of the file anyway), so a log
    can be fed in pages of any size: `feed` gives back the records that are complete,
    `finish` the rest.
    """

    __slots__ = ("_run",)

    def __init__(self) -> None:
        self._run: list[SessionEvent] = []

    def feed(self, event: SessionEvent) -> list[dict[str, Any]]:
        """The records `event` completes (the run before it, itself), in log order."""
        check_exportable(event)
        run = self._run
        if _packable(event):
            out = self._flush() if run and not _continues(run[-1], event) else []
            self._run.append(event)
            return out
        if not run:
            return [event_record(event)]
        out = self._flush()
        out.append(event_record(event))
        return out

    def finish(self) -> list[dict[str, Any]]:
        """The records of the run still open (call once, after the last event)."""
        return self._flush()

    def _flush(self) -> list[dict[str, Any]]:
        run, self._run = self._run, []
        if len(run) >= MIN_PACKED_RUN:
            return [_packed_row(run)]
        return [event_record(event) for event in run]


def pack_records(events: Iterable[SessionEvent]) -> Iterator[dict[str, Any]]:
    """Records for `events`, maximal packable runs of >= MIN_PACKED_RUN as packed rows."""
    packer = ChunkPacker()
    for event in events:
        yield from packer.feed(event)
    yield from packer.finish()


def _packable(event: SessionEvent) -> bool:
    """Whether a packed row can stand for `event` exactly (whitelisted shape only)."""
    if event.type != _CHUNK_EVENT or event.surface_op is not None or event.ignorable:
        return False
    if event.source_event_seqs is not None:
        return False
    if not _is_safe_int(event.seq) or event.seq < 0 or not _is_safe_int(event.time):
        return False
    data = event.data
    if not isinstance(data, dict) or data.keys() != {"turn", "step", "chunk"}:
        return False
    chunk = data["chunk"]
    if not (_is_safe_int(data["turn"]) and _is_safe_int(data["step"]) and isinstance(chunk, dict)):
        return False
    if not _is_safe_int(chunk.get("index")):
        return False
    kind = chunk.get("type")
    if kind in _TEXT_ROWS.values():
        return chunk.keys() == {"type", "index", "text"} and isinstance(chunk["text"], str)
    if kind == _TOOL_DELTA:
        keys = {"type", "index", "id", "argumentsDelta"}
        named = chunk.keys() == keys | {"name"} and isinstance(chunk["name"], str)
        return (named or chunk.keys() == keys) and all(
            isinstance(chunk[k], str) for k in ("id", "argumentsDelta")
        )
    return False


def _continues(prev: SessionEvent, event: SessionEvent) -> bool:
    """Whether packable `event` extends the run ending in packable `prev`."""
    if event.seq != prev.seq + 1 or abs(event.time - prev.time) > MAX_SAFE_INT:
        return False
    a, b = prev.data, event.data
    if (a["turn"], a["step"]) != (b["turn"], b["step"]):
        return False
    ca, cb = a["chunk"], b["chunk"]
    same = ("type", "index", "id", "name")
    return all((k in ca) == (k in cb) and ca.get(k) == cb.get(k) for k in same)


def _packed_row(run: list[SessionEvent]) -> dict[str, Any]:
    first = run[0]
    chunk = first.data["chunk"]
    data: dict[str, Any] = {
        "turn": first.data["turn"],
        "step": first.data["step"],
        "index": chunk["index"],
        "dt": [b.time - a.time for a, b in pairwise(run)],
    }
    if chunk["type"] == _TOOL_DELTA:
        data["id"] = chunk["id"]
        if "name" in chunk:
            data["name"] = chunk["name"]
        data["args"] = [e.data["chunk"]["argumentsDelta"] for e in run]
    else:
        data["texts"] = [e.data["chunk"]["text"] for e in run]
    row_type = _ROW_FOR_DELTA[chunk["type"]]
    return {"type": row_type, "seq0": first.seq, "time0": first.time, "data": data}
