"""Make the trusted-documents manifest for a client's operations.

  session-gateway documents hash FILE.graphql... > trusted-documents.json

prints the JSON manifest `{"sha256:<hex>": "<document>"}` that `serve
--trusted-documents FILE` reads, one entry per file: the document is the
file's text exactly as it is, and its id is `sha256:` and the hex SHA-256 of
the file's bytes, the same as `sha256sum FILE` prints. One id per file (rather
than one per operation) means a client's build can compute the id of each file
it ships with any SHA-256 tool, with no GraphQL printer whose output it must
reproduce byte for byte; a file holding several operations is run with
`documentId` and `operationName`. The id of each file is also printed to
stderr, as `ID  FILE`, for pasting into the client.

Each file must be UTF-8 and parse as a GraphQL executable document (operations
and fragments); a file that does not stops the command (exit 1) and nothing is
printed on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="documents_command", metavar="ACTION", required=True)
    hash_parser = sub.add_parser(
        "hash",
        help="print the trusted-documents manifest for .graphql files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hash_parser.add_argument("files", nargs="+", metavar="FILE", help="a .graphql document")


def _document(path: Path) -> str:
    """The text of `path` if it is an executable GraphQL document; ValueError otherwise."""
    from graphql import ExecutableDefinitionNode, GraphQLError, parse

    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    try:
        document = parse(text)
    except GraphQLError as exc:
        where = f"line {exc.locations[0].line}: " if exc.locations else ""
        raise ValueError(f"{where}{exc.message}") from None
    if not all(isinstance(d, ExecutableDefinitionNode) for d in document.definitions):
        raise ValueError("it holds schema definitions; a trusted document holds operations")
    return text


def hash_files(paths: list[Path]) -> list[tuple[Path, str, str]]:
    """`(path, id, document)` for each of `paths`, in order; ValueError naming a bad file."""
    from gateway.server.documents import document_id

    out = []
    for path in paths:
        try:
            text = _document(path)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        out.append((path, document_id(text), text))
    return out


def run(args: argparse.Namespace) -> int:
    try:
        hashed = hash_files([Path(f) for f in args.files])
    except ValueError as exc:
        print(f"session-gateway documents hash: {exc}", file=sys.stderr)
        return 2  # a bad path or document is bad input, like every command's (README)
    for path, key, _ in hashed:
        print(f"{key}  {path}", file=sys.stderr)
    manifest = {key: text for _, key, text in hashed}  # a file listed twice appears once
    json.dump(manifest, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
    return 0
