"""Which sessions a caller may see (SPEC §10): grants, and the scoped corpus they define.

A `Scope` is the union of its grants:

* `all` — every session;
* `cwd:PREFIX` — sessions whose cwd equals PREFIX or starts with PREFIX + "/";
* `id:GLOB` — sessions whose id matches GLOB (`*` any run, `?` one character;
  every other character, `[` included, is literal);
* `tree:ID` — ID and every descendant of it in the whole corpus: a session is
  in the tree when following parentSession links up from it (through live and
  persisted sessions alike) reaches ID. A child whose parentSession is ID is in
  it even when ID itself is absent.

The core applies a scope in one place, `gateway.core.visibility`: every
question an observation answers behaves as if the visible sessions were the
whole corpus. The first three grants are a property of a header alone
(`direct`); `tree:` needs the session's ancestry, which the observation walks
(and pushes down to the backend as a `ScopeFilter`, see `gateway.core.backend`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .model import SessionHeader

GRANT_KINDS = ("all", "cwd:", "id:", "tree:")


class InvalidGrant(ValueError):
    """A grant string that is not one of the SPEC §10 forms."""


def glob_regex(pattern: str) -> re.Pattern[str]:
    """`*` and `?` as wildcards, everything else literal, matching the whole id."""
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


def cwd_matches(cwd: str | None, prefix: str) -> bool:
    return cwd is not None and (cwd == prefix or cwd.startswith(prefix + "/"))


@dataclass(frozen=True)
class Scope:
    """A caller's grants, parsed; see the module docstring."""

    sees_all: bool = False
    cwd_prefixes: tuple[str, ...] = ()
    id_globs: tuple[str, ...] = ()
    trees: frozenset[str] = frozenset()
    _regexes: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def parse(cls, grants: Iterable[str]) -> Scope:
        """The scope of these grant strings; InvalidGrant names the first bad one."""
        sees_all = False
        cwds: list[str] = []
        globs: list[str] = []
        trees: set[str] = set()
        for grant in grants:
            if grant == "all":
                sees_all = True
            elif grant.startswith("cwd:") and len(grant) > 4:
                if grant.endswith("/"):
                    raise InvalidGrant(
                        f"grant {grant!r}: write the prefix without a trailing '/' "
                        "(cwd:/home/me matches /home/me and /home/me/...; use `all` for everything)"
                    )
                cwds.append(grant[4:])
            elif grant.startswith("id:") and len(grant) > 3:
                globs.append(grant[3:])
            elif grant.startswith("tree:") and len(grant) > 5:
                trees.add(grant[5:])
            else:
                raise InvalidGrant(
                    f"grant {grant!r} is not one of: all, cwd:PREFIX, id:GLOB, tree:ID"
                )
        if sees_all:
            return cls(sees_all=True)
        return cls(
            False,
            tuple(dict.fromkeys(cwds)),
            tuple(dict.fromkeys(globs)),
            frozenset(trees),
            tuple(glob_regex(g) for g in dict.fromkeys(globs)),
        )

    @property
    def has_trees(self) -> bool:
        return bool(self.trees)

    def direct(self, header: SessionHeader) -> bool:
        """Whether a grant other than `tree:` makes this session visible."""
        if self.sees_all:
            return True
        cwd = header.cwd
        if cwd is not None and any(cwd_matches(cwd, p) for p in self.cwd_prefixes):
            return True
        return any(r.fullmatch(header.id) for r in self._regexes)

    def in_trees(self, chain: Iterable[str]) -> bool:
        """Whether a session whose id and ancestor ids (up to the first one the corpus
        lacks, that one included) are `chain` lies in one of the granted trees."""
        return any(i in self.trees for i in chain)


EVERYTHING = Scope(sees_all=True)
"""The scope of a caller who sees the whole corpus (auth off, or an `all` grant)."""


__all__ = ["EVERYTHING", "GRANT_KINDS", "InvalidGrant", "Scope", "cwd_matches", "glob_regex"]
