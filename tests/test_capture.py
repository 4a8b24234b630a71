"""Capture: the torch backend writes a trace the core reads, with the seed's range names, and
the torch- and nsys-backend captures of each sample workload agree."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys

import pytest

from kview.analysis import nvtx_ranges as nv
from kview.trace import open_trace

from conftest import SAMPLES, TORCH_TRACES

# skipped without torch, which is not imported here: the captures run in children (importing it
# costs each worker that collects this file about 2.5 CPU s)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _user_ranges(trace) -> set[str]:
    names = nv.with_names(trace, nv.labelled(trace).select("name_code").unique())["name"].to_list()
    return {n.split(":", 1)[1] for n in names if not nv.is_op_marker(n)}


def _per_step_kernels(trace) -> int:
    return trace.columns("kernels", ["start"]).height


def test_cpu_capture_with_torch_backend_opens_in_kview(tmp_path):
    out = tmp_path / "lm.sqlite"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kview.cli",
            "capture",
            "lm",
            "--size",
            "tiny",
            "--ctx",
            "16",
            "--mode",
            "train",
            "--warmup",
            "0",
            "--backend",
            "torch",
            "--shapes",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ran on the CPU" in r.stderr  # no CUDA here, and kview says so
    t = open_trace(out, use_cache=False)
    assert t.metadata["EXPORT_PRODUCT_NAME"] == "kview capture (torch.profiler)"
    assert t.metadata["CAPTURE_MODEL"] == "lm" and t.metadata["CAPTURE_MODE"] == "train"
    users = _user_ranges(t)
    assert {
        "profiled_step",
        "forward_pass",
        "backward_pass",
        "optimizer_step",
        "layer_0",
        "layer_1",
        "attention_sublayer",
        "ffn_sublayer",
        "computing softmax",
        "lm_head",
    } <= users
    names = nv.with_names(t, nv.labelled(t).select("name_code").unique())["name"].to_list()
    # CPU ops are written as nsys writes emit_nvtx markers, forward and backward
    assert any(n.startswith(":aten::linear, seq = ") and ", sizes = [[" in n for n in names)
    assert any(n.startswith(":MmBackward0, seq = ") for n in names)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 0  # no GPU here


@pytest.mark.parametrize("torch_trace", TORCH_TRACES, ids=lambda p: p.stem)
def test_torch_and_nsys_backends_agree(torch_trace):
    nsys_trace = SAMPLES / torch_trace.name.replace("_torch.sqlite", "_nsys.sqlite")
    a, b = open_trace(torch_trace, use_cache=False), open_trace(nsys_trace, use_cache=False)
    ka, kb = _per_step_kernels(a), _per_step_kernels(b)
    assert ka > 100 and abs(ka - kb) <= 0.05 * kb, (ka, kb)
    assert _user_ranges(a) == _user_ranges(b) and len(_user_ranges(a)) >= 5


def test_sample_traces_folder_stays_small():
    total = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
    assert total < 40 * 2**20, total


@pytest.mark.parametrize("cmd,flag", [("capture", "--backend"), ("bench", "--memory-snapshot")])
def test_capture_and_bench_help(cmd, flag):
    r = subprocess.run([sys.executable, "-m", "kview.cli", cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and flag in r.stdout
