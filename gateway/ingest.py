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
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gateway.core.errors import SessionQueryError
from gateway.dsh_jsonl import Artifact, ArtifactError, read_artifact
from gateway.persistence.errors import PersistenceError
from gateway.persistence.sql import SqlPersistence

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

    A directory stands for every `*.jsonl` file below it (recursively, sorted by
    path); a file is taken as given, whatever its name. Duplicates are dropped.
    """
    files: list[Path] = []
    missing: list[FileReport] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                (p for p in path.rglob(f"*{ARTIFACT_SUFFIX}") if p.is_file()),
                key=lambda p: p.as_posix(),
            )
        elif path.exists():
            found = [path]
        else:
            missing.append(FileReport(str(path), "refused", reason="no such file or directory"))
            continue
        for p in found:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                files.append(p)
    return files, missing


def _located(exc: ArtifactError) -> str:
    if exc.line is None or exc.message.startswith(f"line {exc.line} "):
        return exc.message
    return f"line {exc.line}: {exc.message}"


async def import_file(backend: SqlPersistence, path: Path, *, replace: bool = False) -> FileReport:
    """Import one artifact file; never raises for a bad file (see the module docstring).

    Errors of the database itself (connection refused, timeouts) are reported as
    a refusal of this file too, with the driver's message.
    """
    name = str(path)
    try:
        artifact: Artifact = await asyncio.to_thread(read_artifact, path)
    except ArtifactError as exc:
        return FileReport(name, "refused", reason=_located(exc))
    except OSError as exc:
        return FileReport(name, "refused", reason=f"cannot read it: {exc.strerror or exc}")
    header, events, warnings = artifact.header, artifact.events, artifact.warnings
    try:
        outcome = await backend.import_log(header, events, replace=replace)
    except SessionQueryError as exc:
        reason = exc.message
    except PersistenceError as exc:
        reason = str(exc)
    except Exception as exc:  # the database failed (or refused the write): report, go on
        reason = f"could not be written: {type(exc).__name__}: {str(exc).strip()}"
    else:
        status: Status = "imported" if outcome == "created" else outcome
        return FileReport(name, status, header.id, len(events), warnings=warnings)
    return FileReport(name, "refused", header.id, 0, reason=reason, warnings=warnings)


ProgressCallback = Callable[[int, int, FileReport], None]
"""Called after each file with (files done, files total, that file's report)."""


async def import_paths(
    backend: SqlPersistence,
    paths: Sequence[str | os.PathLike[str]],
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Import every artifact under `paths` (files and directories), one file at a time."""
    files, missing = collect_files(paths)
    summary = ImportSummary(list(missing))
    total = len(files)
    for done, path in enumerate(files, start=1):
        report = await import_file(backend, path, replace=replace)
        summary.reports.append(report)
        if progress is not None:
            progress(done, total, report)
    return summary
