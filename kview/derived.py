"""A trace's derived tables: each declared once, computed once per open trace, one cache path.

A derived table is a function of a Trace (and of hashable arguments) decorated with `@derived`:

    @derived
    def gpu_ops(trace: Trace) -> pl.DataFrame:
        ...the work, here and nowhere else...

Calling `gpu_ops(trace)` computes the table on the first call for that trace and keeps it on
the trace, keyed by the function and its arguments (never by a string), so every view and
command asks for it by the same name and gets the same frame. Its dependencies are the derived
tables it calls. `@derived(persist=KEY)` also keeps the result in the disk cache under KEY (a
tuple of keys for a function returning a tuple of frames), for the tables worth keeping across
runs, through `Trace.persisted`; `restore` is applied to what the cache returns, and `keep` can
refuse to keep a result (one that depends on more than the trace).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

if TYPE_CHECKING:
    from kview.trace import Trace

P = ParamSpec("P")
R = TypeVar("R")

# every derived table declared, in import order (module.function): the graph's nodes
DECLARED: list[str] = []
# table -> the derived tables its computation asked for: the graph's edges, recorded as
# traces are used (`python -c "..."` after a command shows them)
DEPENDS: dict[str, set[str]] = {}
_computing = threading.local()  # per thread: the tables being computed, innermost last


@overload
def derived(fn: Callable[P, R]) -> Callable[P, R]: ...


@overload
def derived(
    *,
    persist: str | tuple[str, ...] | None = None,
    restore: Callable[[Any], Any] | None = None,
    keep: Callable[[Any], bool] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def derived(
    fn: Callable[P, R] | None = None,
    *,
    persist: str | tuple[str, ...] | None = None,
    restore: Callable[[Any], Any] | None = None,
    keep: Callable[[Any], bool] | None = None,
) -> Any:
    def declare(fn: Callable[P, R]) -> Callable[P, R]:
        keys = (persist,) if isinstance(persist, str) else persist

        name = f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def table(*args: P.args, **kwargs: P.kwargs) -> R:
            trace: Trace = args[0]  # type: ignore[assignment]
            store = trace.derived_tables
            key = (table, *args[1:], *sorted(kwargs.items()))
            stack = _computing.__dict__.setdefault("stack", [])
            if stack:
                DEPENDS.setdefault(stack[-1], set()).add(name)
            if key not in store:
                stack.append(name)
                try:
                    if keys is None:
                        store[key] = fn(*args, **kwargs)
                    else:
                        value = trace.persisted(
                            keys, lambda: fn(*args, **kwargs), single=isinstance(persist, str), keep=keep
                        )
                        store[key] = value if restore is None else restore(value)
                finally:
                    stack.pop()
            return store[key]

        DECLARED.append(name)
        return table

    return declare if fn is None else declare(fn)


def derived_if_computed(trace: Trace, table: Callable[..., R], *args: Any) -> R | None:
    """`table(trace, *args)` if it was already computed for this trace, else None (nothing is
    computed): for a consumer that can reuse a table another view built, and has a cheaper way
    of its own otherwise."""
    return trace.derived_tables.get((table, *args))
