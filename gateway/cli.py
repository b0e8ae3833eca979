"""`session-gateway`: the command line (SPEC §8).

Each subcommand lives in its own module under `gateway.commands`, imported
only when it runs, so `--help` stays fast and a command's heavy dependencies
load only for that command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# name -> (module, one-line help). Each module has add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("gateway.commands.serve", "run the GraphQL gateway over HTTP"),
    "import": ("gateway.commands.importer", "import dsh JSONL session artifacts into a database"),
    "export": (
        "gateway.commands.export",
        "write a stored session as a dsh JSONL artifact (or zip)",
    ),
    "migrate": ("gateway.commands.migrate", "bring a database's schema to the current revision"),
    "verify": ("gateway.commands.verify", "check stored derivations against the fold of each log"),
    "token": ("gateway.commands.token", "create, list and revoke access tokens"),
    "mcp": ("gateway.commands.mcp", "serve the read-only session tools to agents over MCP (stdio)"),
    "export-schema": ("gateway.commands.export_schema", "print the GraphQL schema (SDL)"),
    "documents": (
        "gateway.commands.documents",
        "make the trusted-documents manifest (`documents hash FILE.graphql...`)",
    ),
}

DESCRIPTION = """\
Exact, read-only inspection of AI-agent session history: which sessions exist
(live and persisted), every event and whether the model still sees it, lineage
between sessions, and how events replace and cite each other.

The embedded default database is a SQLite file; set SESSION_GATEWAY_DATABASE_URL
or pass --database (sqlite+aiosqlite:///path.db or postgresql+asyncpg://...).
"""


DISTRIBUTION = "session-query-gateway"
"""The installed distribution whose metadata `--version` reports (pyproject.toml's name)."""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (`PROG: error: ...; see PROG --help`) and exit 2, not the
    whole usage block: every bad input gets one clean line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class VersionAction(argparse.Action):
    """`--version`, read from the installed package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version(DISTRIBUTION)
        except PackageNotFoundError:
            text = "unknown (not installed)"
        print(f"session-gateway {text}")  # stdout, like argparse's own version action
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="session-gateway",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or help_text).strip()
        command = sub.add_parser(
            name,
            help=help_text,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(_module=module)
        _name_itself(command)
    return parser


def _name_itself(parser: argparse.ArgumentParser) -> None:
    """Let each (sub)command's parser be found from what it parsed (`_parser`): the
    innermost one parsed last, so its default wins."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _name_itself(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # name the command whose --help lists its options, not the top level's
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code: int = args._module.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
