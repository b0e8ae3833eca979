"""`serve`'s options for browser origins, trusted documents and rate limits (SPEC §10).

Kept apart from `serve` so that command stays about binding and running; the
options become `GatewayConfig` fields, checked once before the server starts,
and a bad value stops it with one line naming what was wrong.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gateway.server.config import (
    DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN,
    DEFAULT_MAX_SUBSCRIPTIONS_SERVER,
)

ENV_CORS_ORIGINS = "SESSION_GATEWAY_CORS_ORIGINS"
ENV_TRUSTED_DOCUMENTS = "SESSION_GATEWAY_TRUSTED_DOCUMENTS"
ENV_RATE_LIMIT = "SESSION_GATEWAY_RATE_LIMIT"


def add_access_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=None,
        metavar="ORIGIN",
        help=(
            "a browser origin (scheme://host[:port], or *) whose pages may call /graphql; "
            f"repeatable (default ${ENV_CORS_ORIGINS}, comma-separated; none)"
        ),
    )
    parser.add_argument(
        "--trusted-documents",
        metavar="FILE",
        default=None,
        help=(
            'JSON manifest {"sha256:<hex>": "<document>"} of documents requests may run '
            "by documentId (make one with `session-gateway documents hash`); "
            f"default ${ENV_TRUSTED_DOCUMENTS}"
        ),
    )
    parser.add_argument(
        "--rate-limit",
        metavar="RATE",
        default=None,
        help=(
            "requests each token (or client address) may make to /graphql and /metrics, "
            f'e.g. "100/second" or "10/second;1000/hour" (default ${ENV_RATE_LIMIT}; no limit)'
        ),
    )
    parser.add_argument(
        "--max-subscriptions",
        type=int,
        default=DEFAULT_MAX_SUBSCRIPTIONS_SERVER,
        metavar="N",
        help=(
            "subscriptions that may run at once on this server, WebSocket and SSE together "
            f"(TOO_MANY_SUBSCRIPTIONS past it; default {DEFAULT_MAX_SUBSCRIPTIONS_SERVER:,})"
        ),
    )
    parser.add_argument(
        "--max-subscriptions-per-token",
        type=int,
        default=DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN,
        metavar="N",
        help=(
            "subscriptions that may run at once for one token, or one client address with "
            f"auth off (default {DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN})"
        ),
    )


def access_options(args: argparse.Namespace) -> dict[str, Any]:
    """`GatewayConfig` fields from the options (or their env vars), not yet checked:
    `GatewayConfig` checks them once (`gateway_config` in `serve`). The manifest file is
    read here (ValueError naming the option when it cannot be)."""
    from gateway.server.documents import ManifestError, load_manifest

    options: dict[str, Any] = {}
    origins = args.cors_origin
    if origins is None:
        origins = [o for o in os.environ.get(ENV_CORS_ORIGINS, "").split(",") if o.strip()]
    options["cors_origins"] = tuple(origins)
    path = manifest_path(args)
    if path:
        try:
            options["trusted_documents"] = load_manifest(path)
        except ManifestError as exc:
            raise ValueError(f"--trusted-documents {path}: {exc}") from None
    rate = args.rate_limit or os.environ.get(ENV_RATE_LIMIT) or None
    if rate:
        options["rate_limit"] = rate
    for flag, name in (
        ("--max-subscriptions", "max_subscriptions"),
        ("--max-subscriptions-per-token", "max_subscriptions_per_token"),
    ):
        value = getattr(args, name)
        if type(value) is not int or value < 1:
            raise ValueError(f"{flag} must be a positive integer, got {value}")
        options[name] = value
    return options


def manifest_path(args: argparse.Namespace) -> str | None:
    return args.trusted_documents or os.environ.get(ENV_TRUSTED_DOCUMENTS) or None
