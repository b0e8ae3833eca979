"""Import dsh JSONL session artifacts (SPEC §9) into a `SqlPersistence` database.

Reusable from Python (`import_paths` returns one `FileReport` per file) and
behind `session-gateway import`.

Per file, in order: read and parse it (`gateway.dsh_jsonl`: packed chunk rows
expanded), validate the whole log with the surface fold, then write the
session in one transaction (`SqlPersistence.import_log`). Outcomes:

- `imported`: a new session was stored;
- `unchanged`: the same header and log (equal as JSON values) were already
  stored, so nothing was written (re-importing is a no-op);
- `replaced`: a different log was stored under the id and `replace=True`
  swapped it atomically (delete and insert in one transaction);
- `refused`: nothing was written, and `reason` says why: the file cannot be
  read, a line is not JSON, the header is missing or malformed, a packed row
  is malformed, the log breaks a surface rule (the message names the rule and
  the seq), or a different log is stored under the id (without `replace`).

A torn final record (a last line without its newline that is not JSON, as a
writer interrupted mid-line leaves it) is discarded with a warning, exactly as
the harness that writes these files does when it loads them; the rest of the
file is imported and the warning is in the report. A bad file never stops the
others.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gateway.core.errors import SessionQueryError
from gateway.dsh_jsonl import DEFAULT_MAX_LINE_BYTES, Artifact, ArtifactError, read_artifact
from gateway.persistence.errors import PersistenceError, describe_failure
from gateway.persistence.sql import ImportOutcome, SqlPersistence
from gateway.persistence.writes import PreparedImport, prepare_import

Status = Literal["imported", "unchanged", "replaced", "refused"]
STATUSES: tuple[Status, ...] = ("imported", "unchanged", "replaced", "refused")
ARTIFACT_SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class FileReport:
    """What happened to one file. `events` is the log's length (0 when refused)."""

    path: str
    status: Status
    session_id: str | None = None
    events: int = 0
    reason: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(slots=True)
class ImportSummary:
    """Every file's report, in the order the files were imported."""

    reports: list[FileReport] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for r in self.reports if r.status == status)

    @property
    def refused(self) -> list[FileReport]:
        return [r for r in self.reports if r.status == "refused"]

    @property
    def ok(self) -> bool:
        """True when no file was refused."""
        return not self.refused

    @property
    def events_written(self) -> int:
        return sum(r.events for r in self.reports if r.status in ("imported", "replaced"))

    @property
    def warnings(self) -> int:
        return sum(len(r.warnings) for r in self.reports)


def collect_files(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[FileReport]]:
    """The files to import, and refusals for paths that do not exist.

    A directory stands for every `*.jsonl` file below it (recursively, not into
    symlinked directories, sorted by path); a file is taken as given, whatever
    its name. Duplicates (the same file reached twice) are dropped.
    """
    files: list[Path] = []
    missing: list[FileReport] = []
    seen: set[tuple[int, int]] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [(Path(name), key) for name, key in _artifacts_below(str(path))]
        elif path.exists():
            stat = path.stat()
            found = [(path, (stat.st_dev, stat.st_ino))]
        else:
            missing.append(FileReport(str(path), "refused", reason="no such file or directory"))
            continue
        for p, key in found:
            if key not in seen:
                seen.add(key)
                files.append(p)
    return files, missing


def _artifacts_below(root: str) -> list[tuple[str, tuple[int, int]]]:
    """(path, (device, inode)) of every `*.jsonl` file below `root`, sorted by path.

    One `scandir` per directory: a directory entry's type and inode come with it,
    so a tree of many small files costs no system call per file.
    """
    out: list[tuple[str, tuple[int, int]]] = []
    stack = [(root, os.stat(root).st_dev)]
    while stack:
        directory, device = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # unreadable: skipped, as a glob skips it
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, entry.stat(follow_symlinks=False).st_dev))
                elif entry.name.endswith(ARTIFACT_SUFFIX) and entry.is_file():
                    if entry.is_symlink():
                        target = os.stat(entry.path)
                        out.append((entry.path, (target.st_dev, target.st_ino)))
                    else:
                        out.append((entry.path, (device, entry.inode())))
            except OSError:  # vanished or unreadable meanwhile
                continue
    out.sort()
    return out


def _located(exc: ArtifactError) -> str:
    if exc.line is None or exc.message.startswith(f"line {exc.line} "):
        return exc.message
    return f"line {exc.line}: {exc.message}"


def _read(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Artifact | FileReport:
    """The parsed artifact, or the refusal of a file that cannot be read or parsed."""
    try:
        return read_artifact(path, max_line_bytes=max_line_bytes)
    except ArtifactError as exc:
        return FileReport(str(path), "refused", reason=_located(exc))
    except OSError as exc:
        return FileReport(str(path), "refused", reason=f"cannot read it: {exc.strerror or exc}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SessionQueryError):
        return exc.message
    if isinstance(exc, PersistenceError):
        return str(exc)
    return f"could not be written: {describe_failure(exc)}"


def _outcome_report(
    path: Path, artifact: Artifact, outcome: ImportOutcome | BaseException
) -> FileReport:
    header, events, warnings = artifact.header, artifact.events, artifact.warnings
    if isinstance(outcome, BaseException):
        reason = _reason(outcome)
        return FileReport(str(path), "refused", header.id, 0, reason=reason, warnings=warnings)
    status: Status = "imported" if outcome == "created" else outcome
    return FileReport(str(path), status, header.id, len(events), warnings=warnings)


async def import_file(backend: SqlPersistence, path: Path, *, replace: bool = False) -> FileReport:
    """Import one artifact file; never raises for a bad file (see the module docstring).

    Errors of the database itself (connection refused, timeouts) are reported as
    a refusal of this file too, with the driver's message.
    """
    read = await asyncio.to_thread(_read, path)
    if isinstance(read, FileReport):
        return read
    outcome: ImportOutcome | BaseException
    try:
        outcome = await backend.import_log(read.header, read.events, replace=replace)
    except Exception as exc:  # the log, or the database, refused it: report, go on
        outcome = exc
    return _outcome_report(path, read, outcome)


ProgressCallback = Callable[[int, int, FileReport], None]
"""Called after each file with (files done, files total, that file's report)."""

BATCH_FILES = 500
"""Files loaded (read, parsed, validated, encoded) and written together."""
PARALLEL_FROM = 2_000
"""From this many files on (and with more than one CPU), files are loaded in worker
processes while this one writes: loading is pure Python and the GIL would
otherwise serialise it with the writes."""
MAX_WORKERS = 4

_Loaded = FileReport | tuple[tuple[str, ...], PreparedImport]
"""A file's refusal, or its warnings and its log ready for `import_prepared`."""


def _load_batch(
    paths: Sequence[Path],
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    with_terms: bool = True,
) -> list[_Loaded]:
    """Read, parse, validate and encode each file (in a worker process or thread);
    `with_terms`: tokenize event texts for a PostgreSQL index (see `prepare_import`)."""
    out: list[_Loaded] = []
    for path in paths:
        read = _read(path, max_line_bytes)
        if isinstance(read, FileReport):
            out.append(read)
            continue
        try:
            prepared = prepare_import(read.header, read.events, with_terms=with_terms)
        except Exception as exc:  # the fold's or the encoder's refusal
            out.append(_outcome_report(path, read, exc))
            continue
        out.append((read.warnings, prepared))
    return out


def leading_refusals(
    paths: Sequence[Path], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> list[FileReport]:
    """The refusals of the files before the first one that would import (read, parsed and
    validated as `import_paths` does), or of every file when none would: so a command
    knows before it creates a new database whether the import would write anything.
    Stops at the first good file, so a normal import reads one file twice."""
    refused: list[FileReport] = []
    for path in paths:
        (loaded,) = _load_batch([path], max_line_bytes, with_terms=False)
        if not isinstance(loaded, FileReport):
            break
        refused.append(loaded)
    return refused


def _process_pool(files: int) -> tuple[Executor | None, int]:
    """Worker processes for a big import and how many, or (None, 0): few files, one
    CPU, or no way to start processes here (then files are loaded in a thread)."""
    cpus = os.cpu_count() or 1
    if files < PARALLEL_FROM or cpus < 2:
        return None, 0
    workers = min(MAX_WORKERS, cpus - 1)
    methods = multiprocessing.get_all_start_methods()
    # never fork: this process runs an event loop and the database driver's thread
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    try:
        return ProcessPoolExecutor(workers, mp_context=context), workers
    except (OSError, ValueError, NotImplementedError):  # pragma: no cover - platform limits
        return None, 0


async def import_paths(
    backend: SqlPersistence,
    paths: Sequence[str | os.PathLike[str]],
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    collected: tuple[list[Path], list[FileReport]] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> ImportSummary:
    """Import every artifact under `paths` (files and directories), in file order.

    `collected` is what `collect_files(paths)` returned, when the caller has it.

    Files are loaded (read, parsed, validated with the fold, encoded) in batches
    ahead of the writes: in a thread, or for big imports in worker processes
    (`PARALLEL_FROM`). Each batch is written with `SqlPersistence.import_prepared`:
    many sessions per transaction, each still all or nothing, with exactly the
    outcome `import_file` would report for it.
    """
    files, missing = collected if collected is not None else collect_files(paths)
    summary = ImportSummary(list(missing))
    total = len(files)
    batches = deque(files[i : i + BATCH_FILES] for i in range(0, total, BATCH_FILES))
    pool, workers = _process_pool(total)
    loop = asyncio.get_running_loop()
    with_terms = not backend.is_sqlite
    ahead: deque[tuple[list[Path], asyncio.Future[list[_Loaded]]]] = deque()

    def submit() -> None:
        batch = batches.popleft()
        future: asyncio.Future[list[_Loaded]]
        try:
            if pool is None:
                raise RuntimeError("no worker processes")
            future = loop.run_in_executor(pool, _load_batch, batch, max_line_bytes, with_terms)
        except RuntimeError:  # no pool, or it broke: load in a thread
            future = asyncio.ensure_future(
                asyncio.to_thread(_load_batch, batch, max_line_bytes, with_terms)
            )
        ahead.append((batch, future))

    depth = workers + 1
    done = 0
    try:
        while batches or ahead:
            while batches and len(ahead) < depth:
                submit()
            batch, future = ahead.popleft()
            try:
                loaded = await future
            except Exception:  # a worker process died: load this batch here instead
                loaded = await asyncio.to_thread(_load_batch, batch, max_line_bytes, with_terms)
            ready = [item[1] for item in loaded if not isinstance(item, FileReport)]
            outcomes = iter(await backend.import_prepared(ready, replace=replace))
            for path, item in zip(batch, loaded, strict=True):
                if isinstance(item, FileReport):
                    report = item
                else:
                    warnings, prepared = item
                    artifact = Artifact(prepared.header, tuple(prepared.events), warnings)
                    report = _outcome_report(path, artifact, next(outcomes))
                summary.reports.append(report)
                done += 1
                if progress is not None:
                    progress(done, total, report)
    finally:
        for _, future in ahead:
            future.cancel()
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
    return summary
