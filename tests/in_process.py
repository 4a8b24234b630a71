"""`kview ARGS` run in the test's own process: `main(argv)` with what it writes to stdout and
stderr captured, returned as `subprocess.run` returns a child's. For tests whose subject is what
a command prints, writes or refuses and how it exits, not the process around it (signals, the
supervisor, a memory limit, the interpreter's start or exit, per-process state such as the
frame cache's memory of broken folders or the warnings already said): a `python -m kview.cli`
child spends about a CPU second importing polars and numpy before it reads anything."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import subprocess
from unittest import mock

from kview import warning
from kview.cli import main


def kview_here(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    warning._warned.clear()  # a child starts with no warning said: neither does a run here
    with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own exit: a usage error, --help
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        finally:
            # what the command left open (a connection, a file) is closed here, as at a child's
            # exit: inside the caller's watch of a folder, not during some later test
            gc.collect()
    return subprocess.CompletedProcess(["kview", *argv], code, out.getvalue(), err.getvalue())
