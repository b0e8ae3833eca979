"""`GatewayConfig`: one frozen, validated settings object for `create_app`."""

from __future__ import annotations

import dataclasses

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import DEFAULT_MAX_COST, GatewayConfig, Limits
from gateway.server.documents import ManifestError, document_id


def test_a_config_is_validated_once_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="CORS origin"):
        GatewayConfig(cors_origins=("https://a.example/",))
    with pytest.raises(ValueError, match="rate limit"):
        GatewayConfig(rate_limit="lots")
    with pytest.raises(ManifestError, match="not the SHA-256"):
        GatewayConfig(trusted_documents={document_id("{ a }"): "{ b }"})
    with pytest.raises(ValueError, match="max_depth"):
        Limits(max_depth=0)
    with pytest.raises(ValueError, match="reauth_interval"):
        GatewayConfig(reauth_interval=0)
    with pytest.raises(ValueError, match="not one string"):
        GatewayConfig(cors_origins="https://a.example")  # type: ignore[arg-type]


def test_a_config_holds_its_values_normalised_and_frozen() -> None:
    doc = "{ sessions { totalCount } }"
    config = GatewayConfig(
        cors_origins=["HTTPS://A.example:443", "*", "https://a.example"],  # type: ignore[arg-type]
        rate_limit="5/second",
        trusted_documents={document_id(doc): doc},
    )
    assert config.cors_origins == ("https://a.example", "*")
    assert [item.amount for item in config.rate] == [5]
    assert dict(config.trusted_documents or {}) == {document_id(doc): doc}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rate_limit = "1/second"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.trusted_documents[document_id("x")] = "x"  # type: ignore[index]
    assert GatewayConfig().limits.max_cost == DEFAULT_MAX_COST


def test_create_app_takes_a_config_and_keeps_nothing_on_app_state() -> None:
    query = SessionQuery(live=[SessionStore()])
    app = create_app(query, GatewayConfig(graphiql=False))
    assert app.state._state == {}  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="GatewayConfig"):
        create_app(query, {"graphiql": False})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        create_app(query, max_depth=3)  # type: ignore[call-arg]
