"""`kview bench attention`: a tiny sweep on the CPU here, and the H100 sweeps at the LM notes'
sizes (tests/fixtures/memory/README.md) checked against the memory the computation must hold."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kview.capture import attention_bench  # torch only inside its functions
from kview.cli import main

from conftest import FIXTURES

# torch is imported where a sweep runs, not at collection (about 2.5 CPU s in every worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

MEM = FIXTURES / "memory"
MIB = 2**20


def test_cpu_sweep_has_every_cell_in_every_format(capsys):
    args = [
        "bench",
        "attention",
        "--d-model",
        "8",
        "--seq",
        "16,32",
        "--impl",
        "naive,sdpa",
        "--iters",
        "1",
        "--warmup",
        "0",
    ]
    assert main([*args, "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["Impl"], r["d_model"], r["Seq"]) for r in rows] == [
        (i, 8, s) for i in ("naive", "sdpa") for s in (16, 32)
    ]
    for r in rows:
        assert r["Forward (ms)"] > 0 and r["Backward (ms)"] > 0
        assert r["Mem before backward (MiB)"] is None  # the CPU does not count memory
        assert r["Device"] == "cpu"
    assert main([*args[:4], "--seq", "16", "--iters", "1", "--warmup", "0", "-f", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Impl,Dtype,Compiled,Batch,d_model,Seq,Forward (ms),Backward (ms)") and len(out) == 2


def test_naive_matches_sdpa_numerically():
    import torch

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 24, 8, generator=g) for _ in range(3))
    for causal in (False, True):
        a = attention_bench.naive_attention(q, k, v, causal)
        b = attention_bench.sdpa_attention(q, k, v, causal)
        assert torch.allclose(a, b, atol=1e-5)


def test_bad_arguments_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's exit: usage, then the one error line
        main(["bench", "attention", "--impl", "flash3"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "flash3" in err[-1]


def _rows(name):
    return json.loads((MEM / f"{name}.json").read_text())


def test_h100_sweep_at_the_notes_sizes():
    rows = _rows("attention_naive_fp32")
    assert {(r["d_model"], r["Seq"]) for r in rows} == {
        (d, s) for d in (16, 32, 64, 128) for s in (256, 1024, 4096, 8192, 16384)
    }
    assert all(r["Batch"] == 8 and r["Device"] == "NVIDIA H100 80GB HBM3" for r in rows)


@pytest.mark.parametrize("name", ["attention_naive_fp32", "attention_naive_bf16", "attention_sdpa"])
def test_memory_before_backward_is_what_attention_keeps(name):
    """The naive attention keeps three seq x seq matrices per batch row for the backward pass
    (scores, their exponentials, the softmax) beside Q, K, V, the output and its gradient; the
    fused kernel keeps only those five batch x seq x d_model tensors (and a row statistic).
    Above that only the cuBLAS workspace (< 80 MiB)."""
    for r in _rows(name):
        if r["Mem before backward (MiB)"] == "OOM" or r["Seq"] < 4096:
            continue
        elt = 2 if r["Dtype"] == "bf16" else 4
        b, s, d = r["Batch"], r["Seq"], r["d_model"]
        io = 5 * b * s * d * elt
        need = io + (3 * b * s * s * elt if r["Impl"] == "naive" else 0)
        extra = r["Mem before backward (MiB)"] * MIB - need
        assert 0 <= extra <= (80 * MIB if r["Impl"] == "naive" else b * s * 4 + MIB), (r, extra / MIB)


def test_oom_cells_and_the_sweep_goes_on():
    """Under the notes' 8 GB GPU the naive fp32 attention runs out of memory at 8192 and 16384
    for every d_model (as the notes found), and every later cell is still measured."""
    rows = _rows("attention_naive_fp32_8g")
    oom = [(r["d_model"], r["Seq"]) for r in rows if r["Forward (ms)"] == "OOM"]
    assert oom == [(d, s) for d in (16, 32, 64, 128) for s in (8192, 16384)]
    for r in rows:
        if r["Forward (ms)"] == "OOM":
            assert r["Backward (ms)"] == r["Mem before backward (MiB)"] == r["Peak (MiB)"] == "OOM"
        else:
            assert r["Forward (ms)"] > 0 and r["Backward (ms)"] > 0
            assert r["Peak (MiB)"] * MIB <= 8 * 2**30
    measured_after_oom = [r for i, r in enumerate(rows) if i > 3 and r["Forward (ms)"] != "OOM"]
    assert len(measured_after_oom) == 9
    # the same cells measured on the whole GPU agree in memory (the limit changes nothing else)
    free = {(r["d_model"], r["Seq"]): r for r in _rows("attention_naive_fp32")}
    for r in rows:
        if r["Forward (ms)"] != "OOM":
            assert r["Mem before backward (MiB)"] == free[(r["d_model"], r["Seq"])]["Mem before backward (MiB)"]
