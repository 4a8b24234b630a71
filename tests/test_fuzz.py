"""Fuzzed readers: mutated real traces (SQLite and torch.profiler JSON) must give either a
result or one clean line and exit 2 — never a traceback, never a hang. Bounded for CI."""

from __future__ import annotations

import contextlib
import gzip
import io
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kview.cli import main

from conftest import SAMPLES

SQLITE = (SAMPLES / "ncf_b1048576_train_nsys.sqlite").read_bytes()
JSON = gzip.decompress((SAMPLES / "ncf_b1048576_train_torch.json.gz").read_bytes())
COMMANDS = [["stats", "-r", "all", "-f", "json"], ["kernels", "-f", "csv"], ["layers", "-f", "csv"]]
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@contextlib.contextmanager
def _no_hang(seconds=60):
    def boom(*_):
        raise AssertionError(f"reader hung for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _run(path, command) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = [command[0], str(path), *command[1:], "--no-cache"]
    with _no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


def _check(rc, err, path):
    assert rc in (0, 1, 2), (rc, err)
    assert "Traceback" not in err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0], err


mutation = st.tuples(
    st.sampled_from(["flip", "zero", "truncate", "splice"]), st.floats(0, 1), st.integers(1, 4096), st.integers(0, 255)
)


def _mutate(data: bytes, how) -> bytes:
    kind, where, size, byte = how
    at = int(where * (len(data) - 1))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (1 + byte % 255)]) + data[at + 1 :]
    if kind == "zero":
        return data[:at] + b"\0" * size + data[at + size :]
    if kind == "truncate":
        return data[:at]
    return data[:at] + data[at + size : at + 2 * size] + data[at:]


@FUZZ
@given(how=mutation, cmd=st.sampled_from(COMMANDS))
def test_mutated_sqlite_exports(tmp_path_factory, how, cmd):
    path = tmp_path_factory.mktemp("fz") / "t.sqlite"
    path.write_bytes(_mutate(SQLITE, how))
    _check(*_run(path, cmd), path)


@FUZZ
@given(how=mutation, cmd=st.sampled_from(COMMANDS), gz=st.booleans())
def test_mutated_torch_profiler_json(tmp_path_factory, how, cmd, gz):
    path = tmp_path_factory.mktemp("fz") / ("t.json.gz" if gz else "t.json")
    data = _mutate(JSON, how)
    path.write_bytes(gzip.compress(data) if gz else data)
    _check(*_run(path, cmd), path)


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [',
        '{"traceEvents": 5}',
        "[1, 2, 3]",
        '{"a": 1}',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "x"}]}',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 2, "args": 7}]}',
        '{"traceEvents": [], "deviceProperties": "nope"}',
    ],
)
def test_hand_made_bad_json(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    _check(*_run(path, ["stats", "-r", "all"]), path)
