"""`python -m kview.capture.launch [-m] TARGET [ARGS...]`: run a Python program in this process
as `python TARGET ARGS` (or `python -m TARGET ARGS`) would, with the same sys.argv, sys.path[0]
and `__main__`, inside the capture session that `kview capture` described in KVIEW_CAPTURE
(see session.py). `kview capture -- python train.py` runs `python -m kview.capture.launch
train.py`; under torchrun every rank runs it."""

from __future__ import annotations

import os
import runpy
import sys


def run_target(argv: list[str]) -> None:
    if argv[:1] == ["-m"]:
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        try:  # a misspelt module is one line, as `python -m` says it, not runpy's traceback
            import importlib.util

            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            print(f"kview capture: no module named {module!r} (as `python -m {module}` would say)", file=sys.stderr)
            sys.exit(2)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = argv[0], argv[1:]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def _no_torch() -> None:
    """This Python has no torch: kview capture is told so (a note in its folder, naming this
    interpreter) and says it in one line; the program is not run."""
    import json

    folder = json.loads(os.environ.get("KVIEW_CAPTURE") or "{}").get("dir")
    if folder:
        # only without torch: the profiled process otherwise loads nothing of kview's core
        from kview.capture.command import NO_TORCH

        with open(os.path.join(folder, f"{NO_TORCH}.{os.getpid()}"), "w") as f:
            f.write(sys.executable)
    else:  # not started by kview capture: nobody else says it
        print(f"kview capture: torch is not installed in {sys.executable}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv == ["-m"]:
        print("usage: python -m kview.capture.launch [-m] TARGET [ARGS...] (started by kview capture)", file=sys.stderr)
        sys.exit(2)
    try:
        # deferred: torch, whose absence is said in one line below
        from kview.capture.session import start_from_env
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        _no_torch()

    session = start_from_env()
    ok = False
    try:
        run_target(argv)
        ok = True
    except SystemExit as e:
        ok = e.code in (None, 0)
        raise
    finally:
        session.finish(ok)


if __name__ == "__main__":
    main()
