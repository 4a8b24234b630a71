"""Count the hops of one kview command run in-process: calls into kview's own functions, the
modules they live in, and the calls that go back into a module the walk had already left.

    python bench/hops.py kernels TRACE -f csv        # warm cache (run once before to fill it)

Only named functions count (lambdas, comprehensions and generator expressions are part of the
function that holds them); polars and the standard library are not kview's hops.
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout

SKIP = {"<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<module>"}


def main(argv: list[str]) -> None:
    import kview
    from kview.cli import main as kview_main

    root = os.path.dirname(kview.__file__) + os.sep
    calls: list[tuple[str, str]] = []  # (module, function) of every call into kview
    stack: list[tuple[str, str]] = []  # kview's functions active now, innermost last
    edges: list[tuple[tuple[str, str] | None, tuple[str, str]]] = []  # (caller, callee), first time each
    seen_edges: set = set()
    moves: list[str] = []  # the module control is in after each call or return between modules

    # HOPS_TRANSPARENT=derived: count a decorator's wrapper as part of the function it wraps
    transparent = set(filter(None, os.environ.get("HOPS_TRANSPARENT", "").split(",")))

    def module_of(code) -> str | None:
        f = code.co_filename
        m = f[len(root) :].removesuffix(".py").replace(os.sep, ".") if f.startswith(root) else None
        return None if m in transparent else m

    def profile(frame, event, arg):
        if event not in ("call", "return") or frame.f_code.co_name in SKIP:
            return
        m = module_of(frame.f_code)
        if m is None:
            return
        fn = (m, frame.f_code.co_qualname)
        if event == "call":
            calls.append(fn)
            moves.append(m)
            edge = (stack[-1] if stack else None, fn)
            if edge not in seen_edges:
                seen_edges.add(edge)
                edges.append(edge)
            stack.append(fn)
        else:
            if stack and stack[-1] == fn:
                stack.pop()
            if frame.f_back is not None and (back := module_of(frame.f_back.f_code)) is not None:
                moves.append(back)

    kview_main(argv)  # once untraced: the frame cache is warm, as on any second open
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        sys.setprofile(profile)
        try:
            kview_main(argv)
        finally:
            sys.setprofile(None)
    calls = calls[1:]  # the entry point itself (cli.main) is not a hop
    modules: list[str] = []
    back = switches = 0
    prev = "cli"
    seen = {"cli"}
    for m in moves[1:]:
        if m != prev:
            switches += 1
            back += m in seen
        seen.add(m)
        prev = m
        if m not in modules:
            modules.append(m)
    # the walk: each distinct call (caller -> callee) once, in the order first made
    walk = edges[1:]
    cross = [(a, b) for a, b in walk if a is None or a[0] != b[0]]
    visited, back_walk = {"cli"}, 0
    for a, b in walk:
        if a is not None and a[0] != b[0] and b[0] in visited:
            back_walk += 1
        visited.add(b[0])
    print(
        f"walk (each distinct call once): {len(walk)} calls, {len(cross)} into another module, "
        f"{back_walk} of them back into a module already visited"
    )
    print(f"calls into kview functions: {len(calls)}")
    print(f"distinct functions: {len(set(calls))}")
    print(f"modules visited: {len(seen)} ({', '.join(['cli'] + [m for m in modules if m != 'cli'])})")
    print(f"moves between modules (calls and returns): {switches}, back into a module already left: {back}")
    if os.environ.get("HOPS_LIST"):
        for m, f in calls:
            print(f"  {m}.{f}")


if __name__ == "__main__":
    main(sys.argv[1:])
