"""Four real GPUs (issue 32): HF Llama (168M parameters) under torchrun with DDP and with FSDP2 on
four H200 of one host over NCCL, rank 1 slowed by 20 ms before each step, captured by
`kview capture --annotate` (bench/gpu_multi_gpu.sh): one nsys export per rank, one export of both
processes, and the torch backend. Every figure is checked against rank_truth.py, which reads the
same SQLite files with plain per-process queries."""

from __future__ import annotations

import lzma
import shutil

import pytest
import rank_truth as truth

from kview.analysis.collectives import collectives_by_rank, straggler_instances
from kview.analysis.iterations import iteration_table
from kview.analysis.ranks import open_run

from conftest import ROOT

CAPTURE = ROOT / "tests" / "fixtures" / "capture"
RANKS = 4
FILES = {
    "ddp_nsys_per_rank": [f"llama_ddp_nsys.rank{r}" for r in range(RANKS)],
    "ddp_nsys_1file": ["llama_ddp_nsys_1file"],
    "ddp_torch": [f"llama_ddp_torch.rank{r}" for r in range(RANKS)],
    "fsdp_nsys_per_rank": [f"llama_fsdp_nsys.rank{r}" for r in range(RANKS)],
    "fsdp_torch": [f"llama_fsdp_torch.rank{r}" for r in range(RANKS)],
}
ITERATION_COLUMNS = [
    "Rank",
    "Iteration",
    "Wall (ns)",
    "Busy (ns)",
    "Compute (ns)",
    "Communication (ns)",
    "Exposed comm (ns)",
    "Memory (ns)",
    "Idle (ns)",
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """name -> the fixture unpacked, when first asked for."""
    d = tmp_path_factory.mktemp("llama4gpu")

    class Paths(dict):
        def __missing__(self, name):
            path = self[name] = d / f"{name}.sqlite"
            with lzma.open(CAPTURE / f"{name}.sqlite.xz") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
            return path

    return Paths()


@pytest.fixture(scope="module")
def runs(paths):
    """name -> (kview's run, the independent ranks), each opened when a test first asks for it
    (test workers that get only some of the tests open only those runs)."""

    class Runs(dict):
        def __missing__(self, name):
            ranks: dict = {}
            for i, f in enumerate(FILES[name]):
                ranks.update(truth.from_nsys(str(paths[f]), first_rank=i if "torch" in name else None))
            self[name] = (open_run([str(paths[f]) for f in FILES[name]], use_cache=False), ranks)
            return self[name]

    return Runs()


@pytest.mark.parametrize("name", FILES)
def test_iterations_equal_per_process_queries(runs, name):
    run, ranks = runs[name]
    want = truth.iteration_rows(ranks)
    assert len(want) == RANKS * 3  # profiled steps 3-5 of every rank
    assert sorted(iteration_table(run).select(ITERATION_COLUMNS).rows()) == want


@pytest.mark.parametrize("name", FILES)
def test_collectives_matched_on_every_rank(runs, name):
    """DDP all-reduces its gradient buckets, FSDP all-gathers parameters and reduce-scatters
    gradients: each instance is found on every rank, and the counts and times equal the queries."""
    run, ranks = runs[name]
    got = {(r, c): (n, t, b) for r, c, n, t, b in collectives_by_rank(run).rows()}
    assert got == truth.collectives(ranks)
    kinds = {c for _, c in got}
    assert kinds == ({"AllReduce", "Broadcast"} if name.startswith("ddp") else {"AllGather", "ReduceScatter"})
    # the gradient collectives run as often on every rank; a Broadcast of DDP's buffers at the start of
    # step 6 of one rank falls inside the one-file capture's window, so only instances within the
    # iterations are matched (below)
    for kind in kinds - {"Broadcast"}:
        assert len({got[(r, kind)][0] for r in range(RANKS)}) == 1
    s = straggler_instances(run)
    assert s.height >= 3 * 15 and (s["Ranks"] == RANKS).all()
    assert {(i, c, n): (last, w, m) for i, c, n, _, last, w, m in s.rows()} == truth.stragglers(ranks)
