"""A persistence backend seen through a proxy that wraps each of its coroutine methods.

Metrics (`instrument_backend`) and tracing (`trace_backend`) both need the same
thing: the backend's own methods, each call passing through a wrapper, and
nothing else changed. Only attributes the inner backend has exist on the proxy
(`callable(getattr(proxy, "load_window", None))` answers as for the backend, which
is how the core detects optional capabilities). The wrappers are set as instance
attributes, so runtime-checkable protocols that look attributes up statically
(`inspect.getattr_static`, Python 3.12+) see them too; everything that is not a
public coroutine method passes through untouched, but for `read_snapshot`
(`gateway.core.backend.ReadSnapshots`): the inner backend's snapshot view comes
back behind a proxy of the same kind, so an observation's reads are still seen.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from gateway.core.backend import capabilities_of

_INNER = "_proxied_inner"
_WRAP = "_proxied_wrap"

Wrap = Callable[[object, str], Callable[..., Any]]
"""`wrap(inner, name)` returns the coroutine function that stands for `inner.name`."""


class BackendProxy:
    """Wraps every public coroutine method of `inner` with `wrap` (module docstring)."""

    label = "proxied"

    def __init__(self, inner: object, wrap: Wrap) -> None:
        object.__setattr__(self, _INNER, inner)
        object.__setattr__(self, _WRAP, wrap)
        for name in dir(inner):
            if name.startswith("_"):
                continue
            try:
                static = inspect.getattr_static(inner, name)
            except AttributeError:  # pragma: no cover - dir() listed a dynamic name
                continue
            if isinstance(static, staticmethod | classmethod):
                static = static.__func__
            if inspect.iscoroutinefunction(static):
                object.__setattr__(self, name, _wrapped(inner, name, wrap))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set in __init__: dynamic or non-coroutine attributes.
        inner = object.__getattribute__(self, _INNER)
        value = getattr(inner, name)
        if not name.startswith("_") and inspect.iscoroutinefunction(value):
            call = _wrapped(inner, name, object.__getattribute__(self, _WRAP))
            object.__setattr__(self, name, call)  # once per proxy (a view's, see below)
            return call
        if name == "read_snapshot" and callable(value):
            # kept on the proxy (every observation asks it); the inner one is looked up
            # at each call, so a replaced `read_snapshot` is still the one called
            snapshot = functools.partial(_snapshot_behind, self)
            object.__setattr__(self, name, snapshot)
            return snapshot
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, _INNER), name, value)

    def __repr__(self) -> str:
        return f"<{self.label} {object.__getattribute__(self, _INNER)!r}>"


def _wrapped(inner: object, name: str, wrap: Wrap) -> Callable[..., Any]:
    call = wrap(inner, name)
    with contextlib.suppress(AttributeError):  # a callable without __name__ etc.
        functools.update_wrapper(call, getattr(inner, name), updated=())
    return call


def _snapshot_behind(proxy: BackendProxy, *, retryable: bool = False) -> Any:
    """The inner backend's snapshot (`gateway.core.backend.BackendSnapshot`), its view
    behind a proxy of the proxy's kind and wrapper (whose methods are wrapped on first
    use: a view lives for one observation)."""
    inner = object.__getattribute__(proxy, _INNER)
    if retryable and capabilities_of(inner).retryable:
        found = inner.read_snapshot(retryable=True)
    else:
        found = inner.read_snapshot()
    if found is None or not hasattr(found, "backend"):
        return found
    view = object.__new__(type(proxy))
    object.__setattr__(view, _INNER, found.backend)
    object.__setattr__(view, _WRAP, object.__getattribute__(proxy, _WRAP))
    return type(found)(view, found.close, found.moved)  # not `_replace`: a few us


def inner_of(backend: object, kind: type[BackendProxy] = BackendProxy) -> object:
    """The backend inside a proxy of `kind` (the object itself otherwise)."""
    if isinstance(backend, kind):
        inner: object = object.__getattribute__(backend, _INNER)
        return inner
    return backend


B = TypeVar("B")


def proxy_once(backend: B, kind: type[BackendProxy], *args: Any) -> B:
    """`backend` behind a `kind(backend, *args)` proxy; one already behind such a proxy is
    returned as is. Typed as the backend, whose methods the proxy offers (it is not an
    instance of the backend's class: `inner_of` gives the backend back)."""
    if isinstance(backend, kind):
        return backend
    proxy: Any = kind(backend, *args)
    return cast(B, proxy)
