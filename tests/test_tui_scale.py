"""The explorer on a large trace: the tables that read every NVTX range are made in a worker
process and read back; every view gets exactly what it gets when they are made in-process."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.trace import open_trace
from kview.tui import prepare
from kview.tui.messages import Stage
from kview.tui.views import VIEWS

from conftest import SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


def _equal(a, b, where: str) -> None:
    if isinstance(a, pl.DataFrame):
        if where.endswith("names_shown"):  # a set of (name, name shown) pairs, in no order
            a, b = a.sort(a.columns), b.sort(b.columns)
        assert a.equals(b) and a.schema == b.schema, where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b) and a.dtype == b.dtype, where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            if f.name not in ("trace", "_sums"):
                _equal(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, where


def _messages(use_cache: bool) -> tuple[object, list]:
    """The trace, and every view's document of it (in tab order), as the views fetch them."""
    trace = open_trace(LM, use_cache=use_cache)
    docs = [cls.document for cls in VIEWS if cls.document is not None]
    return trace, [m for doc in docs for m in doc(trace, use_cache) if not isinstance(m, Stage)]


def test_a_large_traces_views_made_in_a_worker_process_equal_those_made_here(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _, here = _messages(use_cache=False)
    monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)  # every trace is large
    made = []
    monkeypatch.setattr(prepare, "prepare", lambda *a, p=prepare.prepare: made.append(1) or p(*a))
    for use_cache in (False, True):
        trace, there = _messages(use_cache)
        assert [type(m) for m in there] == [type(m) for m in here] and len(here) > 8
        for a, b in zip(there, here):
            _equal(a, b, type(a).__name__)
        # one worker per trace, whichever view's document asked first
        assert made == [1]
        made.clear()
        # the explorer itself never read the ranges' labels (the worker did)
        assert trace.store.peek(nv.labels) is None
    # the worker kept the tables in the frame cache: a reopen reads them, no worker runs
    monkeypatch.setattr(prepare, "prepare", lambda *a: (_ for _ in ()).throw(AssertionError("no worker")))
    for a, b in zip(_messages(use_cache=True)[1], here):
        _equal(a, b, type(a).__name__)
