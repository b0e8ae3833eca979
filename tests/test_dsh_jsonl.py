"""Rules of the dsh JSONL artifact reader/writer (SPEC §9, gateway/dsh_jsonl.py)."""

from __future__ import annotations

import ast
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.model import SessionEvent, SessionHeader
from gateway.dsh_jsonl import (
    MAX_SAFE_INT,
    Artifact,
    ArtifactError,
    dumps_artifact,
    parse_artifact,
    read_artifact,
)

CORPUS = Path(__file__).parent / "data" / "dsh-jsonl"
CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))
MODULE = Path(__file__).parent.parent / "gateway" / "dsh_jsonl.py"

HEADER = '{"type":"session","version":0,"id":"s1","createdAt":1000}'


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def artifact(*records: dict[str, Any] | str, header: str = HEADER) -> str:
    """Artifact text from a header and records (dicts become JSON lines)."""
    rows = [r if isinstance(r, str) else line(r) for r in records]
    return "".join(f"{row}\n" for row in (header, *rows))


def plain(seq: int, etype: str = "turn/start", **extra: Any) -> dict[str, Any]:
    return {"type": etype, "seq": seq, "time": 1000 + seq, "data": {}, **extra}


def plain_event(seq: int) -> SessionEvent:
    return SessionEvent.from_json(plain(seq))


def dumped_rows(events: list[SessionEvent]) -> list[dict[str, Any]]:
    """The JSON records `dumps_artifact` writes after the header."""
    return [json.loads(r) for r in dumps_artifact(HDR, events).splitlines()[1:]]


def delta(
    seq: int, time: int, text: str, *, kind: str = "text-delta", index: int = 0
) -> SessionEvent:
    chunk = {"type": kind, "index": index, "text": text}
    return SessionEvent("assistant/chunk", seq, time, {"turn": 1, "step": 1, "chunk": chunk})


def tool_delta(
    seq: int, time: int, args: str, *, name: str | None = "bash", call: str = "c1"
) -> SessionEvent:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": 0, "id": call}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return SessionEvent("assistant/chunk", seq, time, {"turn": 1, "step": 1, "chunk": chunk})


HDR = SessionHeader(id="s1", created_at=1000)
TEXT_ROW = {
    "type": "text-chunks",
    "seq0": 0,
    "time0": 1000,
    "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 2], "texts": ["a", "b", "c"]},
}


def raises_at(text: str, line_no: int, match: str) -> ArtifactError:
    with pytest.raises(ArtifactError, match=match) as info:
        parse_artifact(text, path="x.jsonl")
    assert info.value.line == line_no
    assert info.value.path == "x.jsonl"
    assert str(info.value).startswith(f"x.jsonl:{line_no}: ")
    return info.value


# ------------------------------------------------------------------ the corpus


def test_corpus_holds_the_120_artifacts():
    assert len(CORPUS_FILES) == 120


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_every_corpus_file_parses_with_seqs_contiguous_from_zero_in_file_order(path: Path):
    parsed = read_artifact(path)
    assert parsed.header.id == path.stem
    assert parsed.warnings == ()
    assert [event.seq for event in parsed.events] == list(range(len(parsed.events)))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_round_trip_parse_dumps_parse_is_identity(path: Path):
    first = read_artifact(path)
    for pack in (True, False):
        again = parse_artifact(dumps_artifact(first.header, first.events, pack_chunks=pack))
        assert again.header == first.header
        assert again.events == first.events


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_redump_is_byte_identical_except_an_added_header_version(path: Path):
    original = path.read_text(encoding="utf-8")
    parsed = read_artifact(path)
    redumped = dumps_artifact(parsed.header, parsed.events)
    header_line, _, body = original.partition("\n")
    new_header_line, _, new_body = redumped.partition("\n")
    assert new_body == body
    if "version" in json.loads(header_line):  # 9 corpus headers omit it; it reads as 0
        assert new_header_line == header_line
    else:
        assert json.loads(new_header_line) == {**json.loads(header_line), "version": 0}


# ------------------------------------------------------------ chunk expansion


def test_packed_rows_expand_to_one_chunk_event_per_member_with_summed_gaps():
    def row(tag: str, seq0: int, time0: int, **data: Any) -> dict[str, Any]:
        return {"type": tag, "seq0": seq0, "time0": time0, "data": {"turn": 1, "step": 2, **data}}

    text = artifact(
        row("text-chunks", 0, 1000, index=0, dt=[5, 0, 7], texts=["a", "b", "c", "d"]),
        row("reasoning-chunks", 4, 2000, index=1, dt=[3], texts=["x", "y"]),
        row(
            "tool-call-chunks",
            6,
            3000,
            index=2,
            dt=[1, 2],
            id="c1",
            name="bash",
            args=["{", '"a"', ":1}"],
        ),
        row("tool-call-chunks", 9, 3010, index=2, dt=[], id="c1", args=["!"]),
    )
    events = parse_artifact(text).events

    def ev(seq: int, time: int, chunk: dict[str, Any]) -> SessionEvent:
        return SessionEvent("assistant/chunk", seq, time, {"turn": 1, "step": 2, "chunk": chunk})

    def text_chunk(kind: str, index: int, t: str) -> dict[str, Any]:
        return {"type": kind, "index": index, "text": t}

    def tool_chunk(args: str, **name: str) -> dict[str, Any]:
        return {"type": "tool-call-delta", "index": 2, "id": "c1", **name, "argumentsDelta": args}

    assert events == (
        ev(0, 1000, text_chunk("text-delta", 0, "a")),
        ev(1, 1005, text_chunk("text-delta", 0, "b")),
        ev(2, 1005, text_chunk("text-delta", 0, "c")),
        ev(3, 1012, text_chunk("text-delta", 0, "d")),
        ev(4, 2000, text_chunk("reasoning-delta", 1, "x")),
        ev(5, 2003, text_chunk("reasoning-delta", 1, "y")),
        ev(6, 3000, tool_chunk("{", name="bash")),
        ev(7, 3001, tool_chunk('"a"', name="bash")),
        ev(8, 3003, tool_chunk(":1}", name="bash")),
        ev(9, 3010, tool_chunk("!")),
    )


def test_negative_dt_gap_is_accepted_as_the_harness_and_corpus_do():
    row = json.loads(json.dumps(TEXT_ROW))
    row["data"]["dt"] = [-500, 2]
    events = parse_artifact(artifact(row)).events
    assert [e.time for e in events] == [1000, 500, 502]


def test_expanded_events_keep_file_order_without_sorting():
    text = artifact(plain(5), {**TEXT_ROW, "seq0": 1}, plain(0))
    assert [e.seq for e in parse_artifact(text).events] == [5, 1, 2, 3, 0]


# ------------------------------------------------- torn records, blank lines


def test_torn_final_line_is_discarded_with_a_warning():
    text = artifact(plain(0), plain(1)) + '{"type":"turn/st'
    parsed = parse_artifact(text, path="x.jsonl")
    assert [e.seq for e in parsed.events] == [0, 1]
    assert len(parsed.warnings) == 1
    assert parsed.warnings[0].startswith("x.jsonl:4: discarded a torn final record")


def test_unterminated_final_line_that_is_json_is_kept():
    text = artifact(plain(0)) + line(plain(1))
    parsed = parse_artifact(text)
    assert [e.seq for e in parsed.events] == [0, 1]
    assert parsed.warnings == ()


def test_non_json_middle_line_is_an_error_naming_its_line():
    text = artifact(plain(0), "{not json", plain(1))
    raises_at(text, 3, "not a JSON record")


def test_complete_but_invalid_last_line_is_an_error():
    raises_at(artifact(plain(0), '{"type":"turn/st'), 3, "not a JSON record")


def test_nan_is_not_json():
    raises_at(artifact('{"type":"x","seq":0,"time":NaN,"data":{}}'), 2, "not a JSON record")


def test_blank_lines_after_the_header_are_skipped_with_a_warning():
    text = artifact(plain(0), "", "   ", plain(1))
    parsed = parse_artifact(text, path="x.jsonl")
    assert [e.seq for e in parsed.events] == [0, 1]
    assert parsed.warnings == ("x.jsonl: skipped blank line(s) 3, 4",)


def test_event_line_that_is_not_an_event_object_is_an_error():
    raises_at(artifact(plain(0), "[1, 2]"), 3, "invalid event: an event must be a JSON object")
    raises_at(artifact('{"seq":0}'), 2, "invalid event: event has no string 'type'")


# ---------------------------------------------------------------- the header


@pytest.mark.parametrize("text", ["", "\n"], ids=["empty", "newline-only"])
def test_missing_header_is_an_error_at_line_1(text: str):
    raises_at(text, 1, "session header")


def test_header_line_that_is_not_json_is_an_error_at_line_1():
    raises_at(artifact(header='{"type":"session",'), 1, "line 1 is not JSON")


def test_header_not_tagged_session_is_an_error_at_line_1():
    raises_at(artifact(header='{"type":"turn/start","id":"s1","createdAt":1}'), 1, "not tagged")
    raises_at(artifact(plain(0), header=line(plain(0))), 1, "not tagged")


@pytest.mark.parametrize("missing", ["id", "createdAt"])
def test_header_missing_id_or_created_at_is_an_error_at_line_1(missing: str):
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 1000}
    del header[missing]
    raises_at(artifact(header=line(header)), 1, f"invalid session header: .*'{missing}'")


def test_header_of_an_unknown_format_version_is_an_error_at_line_1():
    raises_at(artifact(header=HEADER.replace('"version":0', '"version":1')), 1, "version 1")


def test_header_without_version_reads_as_version_0():
    header = parse_artifact(artifact(header='{"type":"session","id":"s","createdAt":5}')).header
    assert header == SessionHeader(id="s", created_at=5, version=0)


# --------------------------------------------------------- malformed packed rows


def _mutated(change: Any) -> dict[str, Any]:
    row = json.loads(json.dumps(TEXT_ROW))
    change(row)
    return row


MALFORMED_ROWS = {
    "dt-too-long": (lambda r: r["data"]["dt"].append(1), "dt has 3 gaps for 3 members"),
    "dt-too-short": (lambda r: r["data"]["dt"].pop(), "dt has 1 gaps for 3 members"),
    "dt-not-list": (lambda r: r["data"].update(dt=5), "dt must be a list"),
    "dt-float": (lambda r: r["data"]["dt"].__setitem__(0, 1.5), "dt must be a list of integer"),
    "no-seq0": (lambda r: r.pop("seq0"), r"missing \['seq0'\]"),
    "no-time0": (lambda r: r.pop("time0"), r"missing \['time0'\]"),
    "negative-seq0": (lambda r: r.update(seq0=-1), "seq0 must be a non-negative"),
    "string-time0": (lambda r: r.update(time0="1"), "time0 must be an integer"),
    "bool-turn": (lambda r: r["data"].update(turn=True), "turn must be an integer"),
    "texts-not-strings": (lambda r: r["data"]["texts"].__setitem__(1, 2), "texts must be"),
    "texts-empty": (lambda r: r["data"].update(texts=[], dt=[]), "texts must be a non-empty"),
    "extra-envelope-key": (lambda r: r.update(seq=0), r"unexpected \['seq'\]"),
    "extra-data-key": (lambda r: r["data"].update(id="c"), r"unexpected \['id'\]"),
    "data-not-object": (lambda r: r.update(data=[]), "data must be an object"),
    "time-out-of-range": (lambda r: r.update(time0=MAX_SAFE_INT), "member times leave"),
    "tool-args-missing": (lambda r: r.update(type="tool-call-chunks"), "missing"),
}


@pytest.mark.parametrize(("change", "message"), MALFORMED_ROWS.values(), ids=MALFORMED_ROWS)
def test_malformed_packed_row_is_an_error_naming_its_line(change: Any, message: str):
    error = raises_at(artifact(plain(0), _mutated(change)), 3, message)
    assert "malformed" in error.message


def test_tool_call_row_with_non_string_name_is_an_error():
    row = {
        "type": "tool-call-chunks",
        "seq0": 0,
        "time0": 0,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [], "id": "c", "name": 3, "args": [""]},
    }
    raises_at(artifact(row), 2, "name must be a string")


# ------------------------------------------------------------------ encoding


def test_non_utf8_file_is_an_error_naming_the_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(artifact(plain(0)).encode() + b'{"type":"x\xff"}\n')
    with pytest.raises(ArtifactError, match="not UTF-8") as info:
        read_artifact(path)
    assert (info.value.path, info.value.line) == (str(path), 3)


def test_non_utf8_torn_tail_is_discarded_with_a_warning(tmp_path: Path):
    path = tmp_path / "torn.jsonl"
    path.write_bytes(artifact(plain(0)).encode() + '{"text":"é'.encode()[:-1])
    parsed = read_artifact(path)
    assert [e.seq for e in parsed.events] == [0]
    assert parsed.warnings == (f"{path}:3: discarded a torn final record (not UTF-8)",)


def test_artifact_error_reads_path_line_message_and_survives_pickling():
    error = ArtifactError("bad row", path="a.jsonl", line=7)
    assert str(error) == "a.jsonl:7: bad row"
    assert str(ArtifactError("bad row", line=7)) == "line 7: bad row"
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.message, copy.path, copy.line) == ("bad row", "a.jsonl", 7)


# ------------------------------------------------------------------- writing


def test_dumps_packs_runs_of_three_or_more_deltas_and_leaves_shorter_runs_plain():
    short_run = [delta(0, 5, "a"), delta(1, 6, "b")]
    long_run = [delta(3, 9, "c"), delta(4, 9, "d"), delta(5, 12, "e")]
    events = [*short_run, plain_event(2), *long_run]
    rows = dumped_rows(events)
    assert [r["type"] for r in rows] == ["assistant/chunk"] * 2 + ["turn/start", "text-chunks"]
    assert rows[3] == {
        "type": "text-chunks",
        "seq0": 3,
        "time0": 9,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [0, 3], "texts": ["c", "d", "e"]},
    }
    assert parse_artifact(dumps_artifact(HDR, events)).events == tuple(events)


def test_dumps_breaks_runs_at_a_seq_gap_kind_change_or_new_block():
    events = [delta(seq, 0, "a") for seq in (0, 1, 2, 4, 5)]  # a gap after seq 2
    events += [delta(6, 0, "f", kind="reasoning-delta"), delta(7, 0, "g", index=1)]
    types = [r["type"] for r in dumped_rows(events)]
    assert types == ["text-chunks"] + ["assistant/chunk"] * 4
    assert parse_artifact(dumps_artifact(HDR, events)).events == tuple(events)


def test_tool_call_members_carry_name_and_runs_split_where_id_or_name_differs():
    named = [tool_delta(seq, seq, "{") for seq in (0, 1, 2)]
    unnamed = [tool_delta(seq, seq, "a", name=None) for seq in (3, 4, 5)]
    events = [*named, *unnamed, tool_delta(6, 6, "d", name=None, call="c2")]
    rows = dumped_rows(events)
    assert [r["type"] for r in rows] == ["tool-call-chunks", "tool-call-chunks", "assistant/chunk"]
    assert rows[0]["data"]["name"] == "bash"
    assert "name" not in rows[1]["data"]
    back = parse_artifact(dumps_artifact(HDR, events)).events
    assert [e.data["chunk"].get("name") for e in back] == ["bash"] * 3 + [None] * 4
    assert back == tuple(events)


def _with(event: SessionEvent, **changes: Any) -> SessionEvent:
    obj = event.to_json()
    obj.update(changes)
    return SessionEvent.from_json(obj)


UNPACKABLE = {
    "ignorable": lambda e: _with(e, ignorable=True),
    "surface-op": lambda e: _with(e, surfaceOp="append"),
    "source-seqs": lambda e: _with(e, sourceEventSeqs=[0]),
    "extra-data-key": lambda e: _with(e, data={**e.data, "extra": 1}),
    "extra-chunk-key": lambda e: _with(e, data={**e.data, "chunk": {**e.data["chunk"], "x": 1}}),
    "float-turn": lambda e: _with(e, data={**e.data, "turn": 1.0}),
    "bool-time": lambda e: _with(e, time=True),
}


@pytest.mark.parametrize("spoil", UNPACKABLE.values(), ids=UNPACKABLE)
@pytest.mark.parametrize("make", [delta, tool_delta], ids=["text", "tool-call"])
def test_chunks_that_a_packed_row_cannot_hold_exactly_are_written_as_plain_lines(
    spoil: Any, make: Any
):
    events = [make(0, 5, "a"), spoil(make(1, 6, "b")), make(2, 7, "c")]
    text = dumps_artifact(HDR, events)
    assert all(json.loads(r)["type"] == "assistant/chunk" for r in text.splitlines()[1:])
    assert parse_artifact(text).events == tuple(events)


def test_a_gap_beyond_the_safe_integer_range_breaks_a_run():
    events = [delta(0, -MAX_SAFE_INT, "a")] + [delta(seq, MAX_SAFE_INT, "b") for seq in (1, 2, 3)]
    rows = dumped_rows(events)
    assert [r["type"] for r in rows] == ["assistant/chunk", "text-chunks"]
    assert parse_artifact(dumps_artifact(HDR, events)).events == tuple(events)


def test_dumps_refuses_an_event_typed_as_a_packed_row_tag():
    with pytest.raises(ValueError, match="packed-row tag"):
        dumps_artifact(HDR, [SessionEvent("text-chunks", 0, 0, {})])


def test_dumps_writes_the_session_tag_first_and_ends_every_line_with_newline():
    text = dumps_artifact(HDR, [plain_event(0)])
    assert text.startswith('{"type":"session",')
    assert text.endswith("\n") and text.count("\n") == 2


def test_dumps_escapes_lone_surrogates_so_the_text_encodes_as_utf8():
    events = [SessionEvent("note", 0, 0, {"s": "a\ud800b", "é": "ü"})]
    text = dumps_artifact(HDR, events)
    assert "\\ud800" in text and "é" in text
    text.encode("utf-8")
    assert parse_artifact(text).events == tuple(events)


# ------------------------------------------------------------------- purity


def test_module_imports_only_stdlib_and_gateway_core():
    imported = set()
    for node in ast.walk(ast.parse(MODULE.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    gateway_modules = {"gateway.core.model", "gateway.core.jsonvalue", "gateway.core.ids"}
    assert {m for m in imported if m.startswith("gateway")} <= gateway_modules
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in imported - gateway_modules)


# ----------------------------------------------------------- property test

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def chunk_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Payloads of a run of deltas sharing one block, so that runs worth packing occur."""
    kind = draw(st.sampled_from(["text-delta", "reasoning-delta", "tool-call-delta"]))
    member_key = "argumentsDelta" if kind == "tool-call-delta" else "text"
    block: dict[str, Any] = {"type": kind, "index": draw(st.sampled_from([0, 1]))}
    if kind == "tool-call-delta":
        block["id"] = draw(st.sampled_from(["c1", "c2"]))
        name = draw(st.sampled_from([None, "bash", "read"]))
        if name is not None:
            block["name"] = name
    turn = draw(st.sampled_from([1, 1, 1, 2, True, 1.0]))  # bool/float turns must stay unpacked
    step = draw(st.sampled_from([1, 1, 2]))
    payloads = []
    for _ in range(draw(st.integers(1, 6))):
        chunk = {**block, member_key: draw(st.text(max_size=4))}
        if draw(st.integers(0, 19)) == 0:
            chunk["extra"] = draw(json_scalars)
        payloads.append({"turn": turn, "step": step, "chunk": chunk})
    return payloads


other_events = st.tuples(
    st.sampled_from(["turn/start", "user/message", "assistant/chunk", "x/y"]), json_values
)
blocks = st.lists(other_events, min_size=1, max_size=1) | chunk_runs().map(
    lambda run: [("assistant/chunk", payload) for payload in run]
)


@st.composite
def logs(draw: st.DrawFn) -> list[SessionEvent]:
    """Logs of runs and other events; seqs mostly contiguous, times mostly close."""
    seq = draw(st.integers(0, 5))
    time = draw(st.integers(0, MAX_SAFE_INT))
    huge_gaps = st.sampled_from([2**53, -(2**54)])  # leave the safe range: cannot be packed
    events = []
    for etype, data in (pair for block in draw(st.lists(blocks, max_size=12)) for pair in block):
        seq += draw(st.sampled_from([1] * 12 + [0, 2, -3]))
        time += draw(huge_gaps if draw(st.integers(0, 29)) == 0 else st.integers(-5, 50))
        surface_op = draw(
            st.sampled_from([None] * 12 + ["append", {"op": "replace", "start": 0, "end": 1}])
        )
        sources = draw(st.sampled_from([None] * 12 + [(), (0, 1)]))
        ignorable = draw(st.integers(0, 14)) == 0
        events.append(SessionEvent(etype, seq, time, data, surface_op, sources, ignorable))
    return events


# header text is storable text (gateway.core.ids): no NUL, no lone surrogate
header_text = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
headers = st.builds(
    SessionHeader,
    id=st.text(header_text, min_size=1, max_size=5),
    created_at=st.integers(0, MAX_SAFE_INT),
    cwd=st.none() | st.text(header_text, max_size=5),
    parent_session=st.none() | st.text(header_text, min_size=1, max_size=5),
    seed_length=st.none() | st.integers(0, 9),
    origin=st.none() | st.just("subagent"),
    delegation_depth=st.none() | st.integers(0, 3),
    agent_preset=st.none() | st.text(header_text, max_size=5),
)


@settings(max_examples=300, deadline=None)
@given(header=headers, events=logs(), pack=st.booleans())
def test_any_log_survives_dumps_then_parse(
    header: SessionHeader, events: list[SessionEvent], pack: bool
):
    parsed = parse_artifact(dumps_artifact(header, events, pack_chunks=pack))
    assert parsed == Artifact(header, tuple(events), ())
