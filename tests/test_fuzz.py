"""Fuzzed readers: mutated real traces (SQLite and torch.profiler JSON) must give either a
result or one clean line and exit 2 — never exit 1 (kview's own bug), never a traceback, never a
hang. Damaged cache files give the answer of `--no-cache` or one line and exit 2, never a changed
answer (the snapshots' mutations are in test_snapshot_safety.py). Bounded for CI."""

from __future__ import annotations

import contextlib
import gzip
import io
import random
import shutil
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kview.cli import main
from kview.io import cache

from conftest import SAMPLES

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

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
    assert rc in (0, 2), (rc, err)
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


CACHED = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
CACHED_COMMANDS = [["stats", "-r", "all", "-f", "json"], ["kernels", "-f", "csv"]]


def _cached_run(command, trace) -> tuple[int, str, str]:
    cache._broken.clear()  # a run that turned the cache off must not spare the next its reads
    out, err = io.StringIO(), io.StringIO()
    with _no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([command[0], str(trace), *command[1:]])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """The cache of a real trace after the commands, and their answers without the cache."""
    folder = tmp_path_factory.mktemp("cachefz")
    trace = folder / "t.sqlite"
    shutil.copy(CACHED, trace)
    xdg = folder / "xdg"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(xdg))
        truth = {}
        for c in CACHED_COMMANDS:
            rc, out, err = _cached_run([*c, "--no-cache"], trace)
            assert rc == 0, err
            truth[c[0]] = out
            assert _cached_run(c, trace)[1] == out
    files = sorted((xdg / "kview" / "frames").glob("*/*.parquet"))
    assert len(files) > 40
    return trace, xdg, files, truth


def _flip(path, rng, n=8):
    data = bytearray(path.read_bytes())
    for _ in range(n):
        data[rng.randrange(len(data))] ^= 1 + rng.randrange(255)
    path.write_bytes(bytes(data))


def _same_answer_or_one_line(trace, truth, xdg):
    for c in CACHED_COMMANDS:
        rc, out, err = _cached_run(c, trace)
        assert rc in (0, 2), (c, rc, err)
        assert "panicked" not in err and "Traceback" not in err, err
        if rc == 0:
            assert out == truth[c[0]], f"{c}: a damaged cache changed the answer"
            assert all(line.startswith("kview: warning: ") for line in err.strip().splitlines()), err
        else:
            assert len(err.strip().splitlines()) == 1 and str(trace) in err, err


@pytest.mark.nightly  # a slow repeat of test_byte_flips_in_every_cache_file_at_once, one file at a time
def test_byte_flips_in_each_cache_file(filled_cache, tmp_path, monkeypatch):
    """Every cache file in turn with 8 bytes flipped, the others intact: the same answers."""
    trace, xdg, files, truth = filled_cache
    rng = random.Random(0)
    work = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(work))
    for f in files:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(xdg, work)
        _flip(work / f.relative_to(xdg), rng)
        _same_answer_or_one_line(trace, truth, xdg)


@pytest.mark.parametrize("seed", range(3))
def test_byte_flips_in_every_cache_file_at_once(filled_cache, tmp_path, monkeypatch, seed):
    trace, xdg, files, truth = filled_cache
    work = tmp_path / "xdg"
    shutil.copytree(xdg, work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(work))
    rng = random.Random(seed)
    for f in files:
        _flip(work / f.relative_to(xdg), rng)
    _same_answer_or_one_line(trace, truth, xdg)
    # rebuilt whole: a run after the damage reads the cache without a warning
    for c in CACHED_COMMANDS:
        rc, out, err = _cached_run(c, trace)
        assert rc == 0 and out == truth[c[0]]
