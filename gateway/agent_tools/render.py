"""The text half of every tool result: what a model reads.

Line-oriented, one fact per line, labels a model can anchor on (`Session …`,
`Best match: seq 12 | user/message | current | <time>`), times in ISO 8601 UTC,
and a closing line whenever a search stopped at its cap, saying how to get the
rest (a narrower query or more filters: there is no cursor to follow). Made
from the structured results only, so the text never says more or less than the
data beside it.
"""

from __future__ import annotations

import json

from .results import (
    EventReadResult,
    EventSearchResult,
    EventTraceResult,
    NeighborEvent,
    SessionInfo,
    SessionSearchResult,
    SessionTraceResult,
)


def _title(title: str | None) -> str:
    return json.dumps(title, ensure_ascii=False) if title is not None else "(untitled)"


def _availability(info: SessionInfo) -> str:
    held = [name for name, on in (("live", info.live), ("persisted", info.persisted)) if on]
    return ", ".join(held) or "unavailable"


def _seqs(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def _capped(cap: int, what: str) -> str:
    return (
        f"Result cap reached: only the best {cap} {what} are shown. Narrow the query or "
        "add filters to find the others."
    )


def session_search(result: SessionSearchResult) -> str:
    if not result.sessions:
        return f"No session matches {json.dumps(result.query, ensure_ascii=False)}."
    lines = [
        f"Session search results ({len(result.sessions)}) for "
        f"{json.dumps(result.query, ensure_ascii=False)}:"
    ]
    for index, hit in enumerate(result.sessions, 1):
        info, match = hit.session, hit.best_match
        lines += [
            "",
            f"{index}. Session {info.id} — {_title(info.title)}",
            f"   Created: {info.created_at}",
            f"   Cwd: {info.cwd if info.cwd is not None else '(none)'}",
            f"   Parent: {info.parent_session_id or 'none (a root session)'}",
            f"   Availability: {_availability(info)}",
            f"   Best match: seq {match.seq} | {match.type} | {match.surface} | {match.time}"
            f" | {match.match_count} match{'es' if match.match_count != 1 else ''}",
            f"   Snippet: {match.snippet}",
        ]
    if result.capped:
        lines += ["", _capped(result.cap, "sessions")]
    return "\n".join(lines)


def event_search(result: EventSearchResult) -> str:
    lines = [f"Session {result.session_id} — {_title(result.title)}", ""]
    query = json.dumps(result.query, ensure_ascii=False)
    if not result.events:
        lines.append(f"No event of this session matches {query}.")
        return "\n".join(lines)
    lines.append(f"Event search results ({len(result.events)}) for {query}:")
    for index, match in enumerate(result.events, 1):
        lines += [
            f"{index}. seq {match.seq} | {match.type} | {match.surface} | {match.time}",
            f"   Snippet: {match.snippet}",
        ]
    if result.capped:
        lines += ["", _capped(result.cap, "events")]
    return "\n".join(lines)


def _line(info: SessionInfo) -> str:
    return f"{info.id} — {_title(info.title)} | {info.created_at} | {_availability(info)}"


def session_trace(result: SessionTraceResult) -> str:
    info = result.session
    lines = [
        f"Session {info.id} — {_title(info.title)}",
        f"Created: {info.created_at}",
        f"Availability: {_availability(info)}",
        "",
        "Ancestors (nearest first):",
    ]
    lines += [f"- {_line(a)}" for a in result.ancestors]
    if result.unresolved_parent_id is not None:
        lines.append(
            f"- {result.unresolved_parent_id} — not found (outside the corpus you can see); "
            "the chain stops here"
        )
    elif not result.ancestors:
        lines.append("- none (a root session)")
    if result.root_id is not None:
        lines.append(f"Root: {result.root_id}")
    lines += ["", f"Descendants ({len(result.descendants)}):"]
    if not result.descendants:
        lines.append("- none")
    lines += [f"{'  ' * (d.depth - 1)}- {_line(d.session)}" for d in result.descendants]
    return "\n".join(lines)


def event_trace(result: EventTraceResult) -> str:
    t = result.target
    replaced_by = result.replaced_by
    return "\n".join(
        [
            f"Session {result.session_id} — {_title(result.title)}",
            f"Target: seq {t.seq} | {t.type} | {t.surface} | {t.time}",
            f"Replaced by: {replaced_by if replaced_by is not None else 'none'}",
            f"Replacement chain: {_seqs(result.replacement_chain)}",
            f"Events replaced by target: {_seqs(result.replaced_event_seqs)}",
            f"Events cited directly as sources: {_seqs(result.source_event_seqs)}",
            f"Events citing the target directly: {_seqs(result.derived_event_seqs)}",
        ]
    )


def _neighbor(n: NeighborEvent) -> str:
    head = f"- seq {n.seq} | {n.type} | {n.time}"
    if not n.text:
        return f"{head} | (no text)"
    text = n.text + ("…" if n.text_truncated else "")
    return head + "\n  " + text.replace("\n", "\n  ")


def event_read(result: EventReadResult) -> str:
    lines = [
        f"Session {result.session_id} — {_title(result.title)}",
        f"Event seq {result.event.get('seq')} (window {result.start_seq}..{result.end_seq}):",
        "```json",
        json.dumps(result.event, ensure_ascii=False, indent=2),
        "```",
    ]
    if result.before:
        lines += ["", "Before:", *(_neighbor(n) for n in result.before)]
    if result.after:
        lines += ["", "After:", *(_neighbor(n) for n in result.after)]
    return "\n".join(lines)


__all__ = ["event_read", "event_search", "event_trace", "session_search", "session_trace"]
