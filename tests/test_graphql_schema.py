"""The served schema has exactly SPEC §7's names, descriptions everywhere, and a fresh SDL file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLObjectType,
    GraphQLScalarType,
    build_client_schema,
    get_introspection_query,
)

from gateway import SessionQuery, create_app
from gateway.server.schema import schema_sdl
from tests.test_graphql_helpers import gql

ROOT = Path(__file__).resolve().parents[1]

# SPEC §7, field -> "type" or ("type", {arg: type}). Fields may be added, never renamed.
SPEC_TYPES: dict[str, dict[str, object]] = {
    "SurfaceOp": {"kind": "SurfaceOpKind!", "start": "Int", "end": "Int"},
    "SessionHeader": {
        "version": "Int!",
        "id": "ID!",
        "createdAt": "EpochMillis!",
        "cwd": "String",
        "parentSessionId": "ID",
        "seedLength": "Int",
        "origin": "String",
        "delegationDepth": "Int",
        "agentPreset": "String",
    },
    "Session": {
        "id": "ID!",
        "header": "SessionHeader!",
        "live": "Boolean!",
        "persisted": "Boolean!",
        "parent": "Session",
        "children": "[Session!]!",
        "lineage": "SessionTrace!",
        "events": (
            "EventConnection!",
            {
                "surface": "[EventSurface!]",
                "first": "Int",
                "after": "String",
                "filter": "EventFilter",  # SPEC §12
            },
        ),
        "surface": "[Event!]!",
        "event": ("Event", {"seq": "Int!"}),
        "window": ("ReadWindow!", {"seq": "Int!", "before": "Int", "after": "Int"}),
    },
    "Event": {
        "sessionId": "ID!",
        "seq": "Int!",
        "type": "String!",
        "time": "EpochMillis!",
        "data": "JSON!",
        "surfaceOp": "SurfaceOp",
        "sourceEventSeqs": "[Int!]",
        "ignorable": "Boolean!",
        "surface": "EventSurface!",
        "session": "Session!",
        "trace": "EventTrace!",
        "replacedBy": "Event",
        "replacementChain": "[Event!]!",
        "replacedEvents": "[Event!]!",
        "sources": "[Event!]!",
        "derived": "[Event!]!",
    },
    "ReadWindow": {
        "session": "SessionHeader!",
        "target": "Event!",
        "events": "[Event!]!",
        "startSeq": "Int!",
        "endSeq": "Int!",
    },
    "EventTrace": {
        "target": "Event!",
        "replacedBy": "Int",
        "replacementChain": "[Int!]!",
        "replacedEventSeqs": "[Int!]!",
        "sourceEventSeqs": "[Int!]!",
        "derivedEventSeqs": "[Int!]!",
    },
    "LineageNode": {"session": "Session!", "descendants": "[LineageNode!]!"},
    "LineageEdge": {"parentId": "ID!", "childId": "ID!"},
    "LineageGraph": {"nodes": "[Session!]!", "edges": "[LineageEdge!]!"},
    "SessionTrace": {
        "target": "Session!",
        "ancestors": "[Session!]!",
        "descendants": "[LineageNode!]!",
        "complete": "Boolean!",
        "root": "Session",
        "unresolvedParentId": "ID",
        "graph": "LineageGraph!",
    },
    "SessionConnection": {
        "edges": "[SessionEdge!]!",
        "nodes": "[Session!]!",
        "pageInfo": "PageInfo!",
        "totalCount": "Int!",
    },
    "SessionEdge": {"cursor": "String!", "node": "Session!"},
    "EventConnection": {
        "edges": "[EventEdge!]!",
        "nodes": "[Event!]!",
        "pageInfo": "PageInfo!",
        "totalCount": "Int!",
    },
    "EventEdge": {"cursor": "String!", "node": "Event!"},
    "PageInfo": {
        "hasNextPage": "Boolean!",
        "hasPreviousPage": "Boolean!",
        "startCursor": "String",
        "endCursor": "String",
    },
    "Query": {
        "sessions": (
            "SessionConnection!",
            {"first": "Int", "after": "String", "filter": "SessionFilter"},  # SPEC §12
        ),
        "session": ("Session", {"id": "ID!"}),
        "events": (
            "EventConnection!",
            {
                "sessionId": "ID!",
                "surface": "[EventSurface!]",
                "first": "Int",
                "after": "String",
                "filter": "EventFilter",  # SPEC §12
            },
        ),
        "event": ("Event", {"sessionId": "ID!", "seq": "Int!"}),
        "readEvent": (
            "ReadWindow!",
            {"sessionId": "ID!", "seq": "Int!", "before": "Int", "after": "Int"},
        ),
        "traceSession": ("SessionTrace!", {"sessionId": "ID!"}),
        "traceEvent": ("EventTrace!", {"sessionId": "ID!", "seq": "Int!"}),
    },
    "Subscription": {  # SPEC §11
        "sessionEvents": ("Event!", {"sessionId": "ID!", "afterSeq": "Int"}),
    },
}
SPEC_ENUMS = {
    "EventSurface": {"CURRENT", "SHADOWED", "LOG_ONLY"},
    "SurfaceOpKind": {"APPEND", "REPLACE"},
}


@pytest.fixture(scope="module")
def introspected():
    app = create_app(SessionQuery())
    body = asyncio.run(gql(app, get_introspection_query(descriptions=True)))
    assert "errors" not in body, body
    return build_client_schema(body["data"])


def test_types_fields_and_arguments_are_named_as_in_spec(introspected) -> None:
    for type_name, fields in SPEC_TYPES.items():
        gtype = introspected.get_type(type_name)
        assert isinstance(gtype, GraphQLObjectType), type_name
        for field_name, spec in fields.items():
            assert field_name in gtype.fields, f"{type_name}.{field_name} is missing"
            field = gtype.fields[field_name]
            want_type, want_args = spec if isinstance(spec, tuple) else (spec, {})
            assert str(field.type) == want_type, (type_name, field_name, str(field.type))
            got_args = {name: str(arg.type) for name, arg in field.args.items()}
            assert got_args == want_args, (type_name, field_name, got_args)
    for enum_name, values in SPEC_ENUMS.items():
        gtype = introspected.get_type(enum_name)
        assert isinstance(gtype, GraphQLEnumType)
        assert set(gtype.values) == values
    for scalar in ("JSON", "EpochMillis"):
        assert isinstance(introspected.get_type(scalar), GraphQLScalarType)
    assert introspected.mutation_type is None
    assert introspected.subscription_type is introspected.get_type("Subscription")


def test_every_type_field_and_argument_has_a_description(introspected) -> None:
    missing = []
    for name, gtype in introspected.type_map.items():
        if name.startswith("__") or name in ("String", "Int", "Boolean", "ID", "Float"):
            continue
        if not gtype.description:
            missing.append(name)
        if isinstance(gtype, GraphQLObjectType):
            missing += [f"{name}.{f}" for f, d in gtype.fields.items() if not d.description]
        if isinstance(gtype, GraphQLEnumType):
            missing += [f"{name}.{v}" for v, d in gtype.values.items() if not d.description]
    assert missing == []


def test_schema_graphql_is_fresh() -> None:
    committed = (ROOT / "schema.graphql").read_text(encoding="utf-8")
    assert committed == schema_sdl(), (
        "schema.graphql is stale: regenerate it with `session-gateway export-schema -o "
        "schema.graphql`"
    )


def test_export_schema_command_prints_the_sdl(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from gateway.commands import export_schema

    parser = argparse.ArgumentParser()
    export_schema.add_arguments(parser)
    assert export_schema.run(parser.parse_args([])) == 0
    assert capsys.readouterr().out == schema_sdl()
