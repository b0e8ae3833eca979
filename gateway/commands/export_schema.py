"""Print the GraphQL schema (SDL) the gateway serves.

The repository's top-level `schema.graphql` is this command's output:

    session-gateway export-schema > schema.graphql

(a test fails when the committed file is stale). `--output PATH` writes the
file instead of printing it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", "-o", metavar="PATH", help="write the SDL to PATH instead of stdout"
    )


def run(args: argparse.Namespace) -> int:
    from gateway.server.schema import schema_sdl

    sdl = schema_sdl()
    if args.output:
        try:
            Path(args.output).write_text(sdl, encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            print(f"session-gateway export-schema: cannot write {args.output}: {reason}",
                  file=sys.stderr)  # fmt: skip
            return 2
    else:
        sys.stdout.write(sdl)
    return 0
