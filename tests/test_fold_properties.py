"""Property tests of the fold (hypothesis): whole-log and incremental folds agree, and
the classification and replacement chains have the shape the contract promises."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import SessionQueryError, SessionStore
from gateway.core import EventSurface, SessionEvent, SurfaceFold, fold_surface

SURFACE = ("user/message", "assistant/message", "tool/result")


@st.composite
def logs(draw, max_size=60):
    """Valid logs: appends, log-only events and replacements of random surface ranges,
    plus (sometimes) one invalid trailing event to exercise rejection."""
    events: list[SessionEvent] = []
    surface: list[int] = []
    n = draw(st.integers(0, max_size))
    for seq in range(n):
        kind = draw(st.sampled_from(["log", "append", "append", "replace"]))
        if kind == "replace" and surface:
            i = draw(st.integers(0, len(surface) - 1))
            j = draw(st.integers(i, len(surface) - 1))
            span = surface[i : j + 1]
            extra = draw(st.lists(st.integers(0, seq - 1), max_size=2)) if seq else []
            sources = tuple(dict.fromkeys([*span, *extra]))
            etype = draw(st.sampled_from(SURFACE[:2]))
            op = {"op": "replace", "start": span[0], "end": span[-1]}
            events.append(SessionEvent(etype, seq, seq, {"n": seq}, op, sources))
            surface[i : j + 1] = [seq]
        elif kind == "append" or (kind == "replace" and not surface):
            etype = draw(st.sampled_from(SURFACE))
            cite = draw(st.booleans()) and seq > 0
            sources = (draw(st.integers(0, seq - 1)),) if cite else None
            events.append(SessionEvent(etype, seq, seq, {"n": seq}, "append", sources))
            surface.append(seq)
        else:
            events.append(SessionEvent("assistant/chunk", seq, seq, {"n": seq}))
    if draw(st.booleans()) and surface:
        # a trailing event that may or may not be valid
        start, end = draw(st.sampled_from(surface)), draw(st.sampled_from(surface))
        op = {"op": "replace", "start": start, "end": end}
        src = tuple(draw(st.lists(st.integers(0, n), max_size=3)))
        events.append(SessionEvent("user/message", n, n, {}, op, src or None))
    return events


def fold_or_error(events):
    try:
        return fold_surface(events)
    except SessionQueryError as exc:
        return exc


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_property_fold_at_once_equals_appending_event_by_event(events):
    whole = fold_or_error(events)
    store = SessionStore()
    session = store.create("p", created_at=0)
    refused_at = None
    for e in events:
        try:
            session.append(
                e.type,
                e.data,
                surface_op=e.surface_op,
                source_event_seqs=e.source_event_seqs,
                time=e.time,
            )
        except SessionQueryError as exc:
            refused_at = (e.seq, exc.message)
            break
    if isinstance(whole, SessionQueryError):
        assert refused_at is not None
        assert refused_at[1] == whole.message  # same rule, same seq, same words
    else:
        assert refused_at is None
        incremental = session._fold.result()
        assert incremental == whole
        assert fold_surface(session.snapshot()[1]) == whole


@settings(max_examples=300)
@given(logs())
def test_property_the_three_classes_partition_the_log(events):
    result = fold_or_error(events)
    if isinstance(result, SessionQueryError):
        return
    classes = result.classes()
    assert len(classes) == len(events)
    current = {s for s, c in enumerate(classes) if c is EventSurface.CURRENT}
    shadowed = {s for s, c in enumerate(classes) if c is EventSurface.SHADOWED}
    log_only = {s for s, c in enumerate(classes) if c is EventSurface.LOG_ONLY}
    assert current | shadowed | log_only == set(range(len(events)))
    assert current == set(result.nodes)
    assert shadowed == {s for r in result.replacements for s in r.shadowed}
    assert all(events[s].type not in SURFACE for s in log_only)


@settings(max_examples=300)
@given(logs())
def test_property_last_element_of_a_replacement_chain_is_current(events):
    result = fold_or_error(events)
    if isinstance(result, SessionQueryError):
        return
    for seq in range(len(events)):
        chain = []
        r = result.replaced_by(seq)
        while r is not None:
            chain.append(r)
            r = result.replaced_by(r)
        assert result.replacement_chain(seq) == chain
        if chain:
            assert result.surface_of(chain[-1]) is EventSurface.CURRENT
            # a shadowed event's chain starts with its replacedBy
            assert result.surface_of(seq) is EventSurface.SHADOWED
            assert chain[0] == result.replaced_by(seq)
            assert seq in result.replacement(chain[0]).shadowed
        else:
            assert result.surface_of(seq) is not EventSurface.SHADOWED


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.data())
def test_property_resuming_from_the_stored_surface_equals_folding_on(events, data):
    """A writer resumes the fold from the stored current surface (seq, label) and the
    codes of the seqs the next events name: appending the rest then gives the same
    classes, surface, labels and replacements, or the same refusal, as one whole fold."""
    cut = data.draw(st.integers(0, len(events)))
    head = SurfaceFold(events.__getitem__)
    try:
        for event in events[:cut]:
            head.apply(event)
    except SessionQueryError:
        return  # only valid prefixes are stored
    whole = SurfaceFold(events.__getitem__)
    current = [(seq, head.label(seq)) for seq in head.nodes()]
    codes = {s: head.code(s) for s in range(cut) if head.code(s) != 1}
    resumed = SurfaceFold.resume(cut, current, codes, events.__getitem__)
    outcomes = []
    for fold in (whole, resumed):
        try:
            for event in events if fold is whole else events[cut:]:
                fold.apply(event)
            outcomes.append(None)
        except SessionQueryError as exc:
            outcomes.append(exc.message)
    assert outcomes[0] == outcomes[1]
    if outcomes[0] is None:
        assert resumed.nodes() == whole.nodes()
        assert resumed.derivations(cut) == whole.derivations(cut)
        assert resumed.replacements_since(cut) == whole.replacements_since(cut)
