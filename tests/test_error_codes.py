"""The gateway's error codes are one list (`gateway.server.codes`): every module takes its
codes from it, every code string in the server's source is on it or is a core contract
code, and the metrics of an app count each under its own label."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import gateway.server
from gateway import SessionQuery, create_app
from gateway.core import ErrorCode
from gateway.observability import GatewayMetrics
from gateway.server.codes import GATEWAY_CODES, GatewayCode

SERVER = Path(gateway.server.__file__).parent
CODE_LIKE = re.compile(r"^[A-Z][A-Z_]{3,}$")


def test_error_codes_every_server_module_takes_its_codes_from_the_one_list() -> None:
    strays = []
    for info in pkgutil.walk_packages([str(SERVER)], "gateway.server."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                CODE_LIKE.match(name)
                and isinstance(value, str)
                and not isinstance(value, GatewayCode)
                and CODE_LIKE.match(value)
            ):
                strays.append(f"{info.name}.{name} = {value!r}")
    assert strays == []


def test_error_codes_written_in_the_server_source_are_known() -> None:
    known = GATEWAY_CODES | {c.value for c in ErrorCode}
    written = set()
    for path in SERVER.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        written |= set(re.findall(r"""["']code["']\s*:\s*["']([A-Z_]+)["']""", text))
        written |= set(re.findall(r"""code\s*=\s*["']([A-Z_]+)["']""", text))
    assert written - known == set()


def test_error_codes_each_counts_under_its_own_metrics_label() -> None:
    metrics = GatewayMetrics()
    create_app(SessionQuery(), metrics=metrics)
    for code in [*GatewayCode, *ErrorCode]:
        assert metrics.error_code_label(code) == code.value
    assert metrics.error_code_label("SOMETHING_ELSE") == "OTHER"


def test_one_classifier_gives_each_error_its_code_without_reading_messages() -> None:
    from graphql import GraphQLError, Source

    from gateway.core import SessionQueryError
    from gateway.server.errors import error_code, format_error

    # Codes come from where an error is made, never from its wording:
    assert error_code(GraphQLError("anything", extensions={"code": "GRAPHQL_PARSE_FAILED"})) == (
        "GRAPHQL_PARSE_FAILED"
    )
    assert error_code(GraphQLError("Syntax Error: looks like a parse error", path=["a"])) == (
        "GRAPHQL_VALIDATION_FAILED"
    )
    # graphql-core locates a variable that does not coerce in the document: the client's input.
    source = Source("query($n: Int) { x }")
    located = GraphQLError("Variable '$n' got invalid value", source=source, positions=[6])
    assert error_code(located) == "BAD_USER_INPUT"
    contract = SessionQueryError(ErrorCode.INVALID_WINDOW, "too wide")
    assert error_code(GraphQLError("x", path=["a"], original_error=contract)) == (
        "SESSION_QUERY_INVALID_WINDOW"
    )
    bug = GraphQLError("boom", path=["a"], original_error=ValueError("secret detail"))
    assert error_code(bug) == "INTERNAL_ERROR"
    shown = format_error(bug)
    assert shown["extensions"]["code"] == "INTERNAL_ERROR" and "secret" not in shown["message"]
