"""`RequestGate`: the per-request rules in one layer behave as the layers they were, in
their order (refusals seen by the rules before the refusing one only, held HTML starts,
the body limit from `receive`, every rule leaving on errors)."""

from __future__ import annotations

import pytest

from gateway.observability.metrics import GatewayMetrics, HttpMetricsRule
from gateway.observability.request_id import RequestIdRule, current_request_id
from gateway.server.gate import RequestGate
from gateway.server.host_check import HostRule
from gateway.server.inflight import InFlightRule
from gateway.server.limits import BodySizeRule
from gateway.server.security_headers import SecurityHeadersRule


def make(app, *, max_in_flight=4, max_bytes=100, hosts=("localhost",)):
    metrics = GatewayMetrics()
    inflight = InFlightRule(max_in_flight)
    gate = RequestGate(
        app,
        [
            RequestIdRule(),
            HttpMetricsRule(metrics),
            SecurityHeadersRule(),
            inflight,
            HostRule(list(hosts)),
            BodySizeRule(max_bytes),
        ],
    )
    return gate, metrics, inflight


async def call(gate, *, path="/graphql", headers=(), bodies=(b"",), kind="http"):
    headers = [(b"host", b"localhost:1"), *headers]
    scope = {"type": kind, "path": path, "headers": headers}
    pending = [
        {"type": "http.request", "body": b, "more_body": i < len(bodies) - 1}
        for i, b in enumerate(bodies)
    ]

    async def receive():
        return pending.pop(0)

    sent = []

    async def send(message):
        sent.append(message)

    await gate(scope, receive, send)
    return sent


def names(message):
    return [name for name, _ in message["headers"]]


async def answer(scope, receive, send, content_type=b"application/json", chunks=(b"{}",)):
    while (await receive()).get("more_body"):
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
    )
    for i, chunk in enumerate(chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})


async def test_request_gate_answers_in_the_order_of_the_layers_it_replaces():
    gate, metrics, inflight = make(answer)
    start, body = await call(gate)
    assert names(start) == [
        b"content-type",
        b"x-content-type-options",
        b"referrer-policy",
        b"x-request-id",
    ]
    assert body["body"] == b"{}"
    assert metrics.value("http_requests_total", route="/graphql", status="200") == 1
    assert inflight.in_flight == 0 and current_request_id() is None


async def test_request_gate_refusal_is_seen_by_the_rules_before_the_refusing_one_only():
    entered = []

    async def app(scope, receive, send):  # pragma: no cover - never reached
        entered.append(scope)

    gate, metrics, inflight = make(app, max_in_flight=0)
    start, body = await call(gate)
    assert start["status"] == 503 and b"SERVER_BUSY" in body["body"]
    assert {b"x-request-id", b"x-content-type-options", b"retry-after"} <= set(names(start))
    assert metrics.value("http_requests_total", route="/graphql", status="503") == 1
    gate, metrics, inflight = make(app, hosts=("example.org",))
    start, _ = await call(gate)
    assert start["status"] == 421 and b"x-request-id" in names(start)
    assert inflight.in_flight == 0  # the in-flight rule, before the host rule, left
    assert entered == []
    # /healthz is never refused by the in-flight cap
    gate, _, _ = make(answer, max_in_flight=0)
    start, _ = await call(gate, path="/healthz")
    assert start["status"] == 200


async def test_request_gate_holds_an_html_start_until_its_body_is_complete():
    async def page(scope, receive, send):
        await answer(scope, receive, send, b"text/html", (b"<script>a()</script>", b"<p>x</p>"))

    gate, metrics, _ = make(page)
    start, body = await call(gate)
    assert names(start)[-3:] == [b"content-security-policy", b"x-frame-options", b"x-request-id"]
    assert body == {"type": "http.response.body", "body": b"<script>a()</script><p>x</p>"}
    assert metrics.value("http_requests_total", route="/graphql", status="200") == 1


async def test_request_gate_refuses_a_streamed_body_past_the_limit_from_receive():
    gate, metrics, inflight = make(answer, max_bytes=5)
    start, body = await call(gate, bodies=(b"abc", b"defg", b""))
    assert start["status"] == 413 and b"PAYLOAD_TOO_LARGE" in body["body"]
    assert b"x-request-id" in names(start) and b"referrer-policy" in names(start)
    assert metrics.value("http_requests_total", route="/graphql", status="413") == 1
    assert inflight.in_flight == 0
    # declared: refused before the app runs
    start, _ = await call(gate, headers=[(b"content-length", b"6")])
    assert start["status"] == 413


async def test_request_gate_rules_all_leave_when_the_app_raises():
    async def boom(scope, receive, send):
        raise RuntimeError("boom")

    gate, metrics, inflight = make(boom)
    with pytest.raises(RuntimeError):
        await call(gate)
    assert metrics.value("http_requests_total", route="/graphql", status="500") == 1
    assert inflight.in_flight == 0 and current_request_id() is None


async def test_request_gate_gives_the_in_flight_slot_back_when_an_event_stream_starts():
    seen = []

    async def stream(scope, receive, send):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        seen.append(inflight.in_flight)
        await send({"type": "http.response.body", "body": b""})

    gate, _, inflight = make(stream)
    await call(gate)
    assert seen == [0] and inflight.in_flight == 0


async def test_request_gate_websocket_gets_the_request_id_and_host_rules_only():
    seen = []

    async def ws(scope, receive, send):
        seen.append(current_request_id())

    gate, metrics, inflight = make(ws)
    await call(gate, kind="websocket")
    assert seen[0] and inflight.in_flight == 0
    assert metrics.value("http_requests_total", route="/graphql", status="500") == 0
    gate, _, _ = make(ws, hosts=("example.org",))
    assert await call(gate, kind="websocket") == [{"type": "websocket.close", "code": 1008}]
