"""`kview capture -- COMMAND`: the user's own program profiled unchanged, on the CPU with the
torch backend (what CI can run): steps and their window, module ranges, a failing command, two
gloo ranks under torchrun, help without torch, and the CPU notices."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

# skipped without torch, which is not imported here: the captures run in children (importing it
# costs each worker that collects this file about 2.5 CPU s)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

EXAMPLES = ROOT / "examples"


def kview(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "kview.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def range_counts(path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return dict(
        con.execute(
            "SELECT text, count(*) FROM NVTX_EVENTS WHERE text NOT LIKE '%, op_id = %' GROUP BY text"
        ).fetchall()
    )


@pytest.fixture(scope="module")
def tiny_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("cap") / "tiny.sqlite"
    r = kview(
        "capture",
        "--backend",
        "torch",
        "--annotate",
        "--skip",
        "1",
        "--steps",
        "2",
        "-o",
        str(out),
        "--",
        "python",
        str(EXAMPLES / "train_tiny.py"),
        "--steps",
        "4",
        cwd=out.parent,
    )
    return r, out


def test_command_form_profiles_the_window_with_step_and_module_ranges(tiny_capture):
    r, out = tiny_capture
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trained 4 steps" in r.stdout  # the program ran to its end with its own argv
    n = range_counts(out)
    assert n.get("step_2") == 1 and n.get("step_3") == 1 and "step_1" not in n and "step_4" not in n
    # one range per module call in each profiled step, named by the module's path
    for name in (
        "TinyLM",
        "embed",
        "layers.0",
        "layers.0.attn",
        "layers.0.mlp",
        "layers.0.mlp.0",
        "layers.1.mlp.2",
        "head",
        "CrossEntropyLoss",
    ):
        assert n.get(name) == 2, (name, n.get(name))
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.sqlite"]  # nothing else left behind
    assert "ran on the CPU" in r.stderr


def test_captured_trace_opens_with_steps_side_by_side_and_module_paths(tiny_capture):
    _, out = tiny_capture
    r = kview("compare", str(out), "--metric", "cpu", "--ranges", "step_2,step_3", "-f", "csv")
    assert r.returncode == 0, r.stderr
    rows = {line.split(",")[0]: line.split(",") for line in r.stdout.splitlines()}
    assert rows["Range"][1:3] == ["step_2", "step_3"]
    assert all(int(v) > 0 for v in rows["layers.0.mlp"][1:3])  # the module's CPU time in each step
    r = kview("stats", str(out), "-r", "nvtx_pushpop_sum", "-f", "csv")
    assert r.returncode == 0, r.stderr
    for name in (":step_2", ":layers.0.mlp.0", ":TinyLM"):
        assert name in r.stdout
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
    assert meta["CAPTURE_BACKEND"] == "torch" and meta["CAPTURE_PROFILED_STEPS"] == "2,3"
    assert meta["CAPTURE_STEP_SOURCE"] == "optimizer" and meta["CAPTURE_DEVICE"] == "cpu"


def test_module_ranges_nest_inside_their_step(tiny_capture):
    _, out = tiny_capture
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    steps = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step_%' ORDER BY start").fetchall()
    mods = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'TinyLM'").fetchall()
    assert len(mods) == 2 and all(any(s <= a and b <= e for s, e in steps) for a, b in mods)


def test_failing_command_says_so_and_writes_nothing(tmp_path):
    out = tmp_path / "fail.sqlite"
    r = kview(
        "capture",
        "--backend",
        "torch",
        "-o",
        str(out),
        "--",
        "python",
        str(EXAMPLES / "train_tiny.py"),
        "--fail-at",
        "2",
    )
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("kview capture:")]
    assert lines[-1].endswith("failed (exit 1); no trace written") and "train_tiny.py --fail-at 2" in lines[-1]
    assert "RuntimeError: failing on purpose in step 2" in r.stderr  # the program's own traceback is shown
    assert list(tmp_path.iterdir()) == []


# A program that marks its own steps and makes no optimizer: with nothing profiled (the profiler
# imports it on start) an optimizer alone would import torch._dynamo, seconds of CPU. Steps counted
# at optimizer steps: test_command_form_profiles_the_window_with_step_and_module_ranges.
MARKED_STEPS = """
import torch

import kview.capture

m = torch.nn.Linear(4, 1)
for step in range(3):
    m(torch.randn(2, 4)).sum().backward()
    kview.capture.step()
"""


def test_skip_past_the_end_writes_nothing(tmp_path):
    script = tmp_path / "marked_steps.py"
    script.write_text(MARKED_STEPS)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "late.sqlite"
    r = kview("capture", "--backend", "torch", "--skip", "9", "-o", str(out), "--", "python", str(script))
    assert r.returncode == 2 and "completed 3 step(s), so --skip 9 left nothing to profile" in r.stderr
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    "cmd,words",
    [
        (["bash", "run.sh"], "cannot profile `bash`"),
        (["python", "-c", "print(1)"], "python -c"),
        ([], "no command after"),
    ],
)
def test_commands_that_cannot_be_profiled_are_refused_in_one_line(tmp_path, cmd, words):
    r = kview("capture", "--backend", "torch", "-o", str(tmp_path / "x.sqlite"), "--", *cmd)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.nightly  # two torch processes and a process group on the CPU: among the slowest of the default run
def test_two_gloo_ranks_under_torchrun_write_one_trace_each(tmp_path):
    out = tmp_path / "ddp.sqlite"
    r = kview(
        "capture",
        "--backend",
        "torch",
        "--annotate",
        "--skip",
        "1",
        "--steps",
        "1",
        "--keep-json",
        "-o",
        str(out),
        "--",
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(EXAMPLES / "train_ddp.py"),
        "--steps",
        "3",
        "--dim",
        "32",
        "--seq",
        "16",
        "--layers",
        "1",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ddp.rank0.json.gz",
        "ddp.rank0.sqlite",
        "ddp.rank1.json.gz",
        "ddp.rank1.sqlite",
    ]
    for rank in (0, 1):
        db = tmp_path / f"ddp.rank{rank}.sqlite"
        n = range_counts(db)
        assert n.get("step_2") == 1 and n.get("DistributedDataParallel") == 1 and n.get("module.encoder.layers.0") == 1
        meta = dict(
            sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            .execute("SELECT name, value FROM META_DATA_EXPORT")
            .fetchall()
        )
        assert meta["CAPTURE_RANK"] == str(rank)
        doc = json.loads(gzip.decompress((tmp_path / f"ddp.rank{rank}.json.gz").read_bytes()))
        assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["world_size"] == 2
    r = kview(
        "compare",
        str(tmp_path / "ddp.rank0.sqlite"),
        str(tmp_path / "ddp.rank1.sqlite"),
        "--metric",
        "cpu",
        "-f",
        "csv",
    )
    assert r.returncode == 0 and "step_2" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "cmd,words",
    [
        ("capture", ["--annotate", "--skip", "COMMAND", "(default: auto)"]),
        ("bench", ["Time forward", "--warmup", "(default: 5)", "(default: 10)"]),
    ],
)
def test_help_works_without_torch(cmd, words):
    code = f"import sys; sys.modules['torch'] = None; from kview.cli import main; sys.exit(main([{cmd!r}, '--help']))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for w in words:
        assert w in text, w


def test_every_bench_option_has_help_and_default():
    from kview.capture.benchmark import parser

    for action in parser()._actions:
        if action.dest in ("help", "model"):
            continue
        assert action.help and ("default" in action.help), action.dest


def test_bench_says_it_ran_on_the_cpu():
    r = kview(
        "bench",
        "lm",
        "--size",
        "tiny",
        "--ctx",
        "16",
        "--modes",
        "forward",
        "--warmup",
        "0",
        "--steps",
        "2",
        "-f",
        "csv",
    )
    assert r.returncode == 0, r.stderr
    assert "timing on the CPU" in r.stderr
    header, row = r.stdout.strip().splitlines()[:2]
    assert header.split(",")[:2] == ["Model", "Device"] and row.split(",")[1] == "cpu"


def test_nsys_commands_for_each_program_form():
    from kview.capture import command as c

    tmp = Path("/tmp/T")
    p = c.parse(["torchrun", "--standalone", "--nproc-per-node=2", "-m", "pkg.train", "--lr", "1"])
    per_rank = c.build(p, "nsys", tmp, shapes=True, window=True, one_file=False)
    at = per_rank.index("--no-python")
    assert per_rank[:at] == ["torchrun", "--standalone", "--nproc-per-node=2"]
    assert per_rank[at + 1 : at + 3] == ["nsys", "profile"] and "--pytorch=autograd-shapes-nvtx" in per_rank
    assert "--capture-range=cudaProfilerApi" in per_rank and str(tmp / "trace.rank%q{RANK}") in per_rank
    assert per_rank[-6:] == ["kview.capture.launch", "-m", "pkg.train", "--lr", "1"][-6:] or per_rank[-7:] == [
        "-u",
        "-m",
        "kview.capture.launch",
        "-m",
        "pkg.train",
        "--lr",
        "1",
    ]
    one = c.build(p, "nsys", tmp, shapes=False, window=False, one_file=True)
    assert one[:2] == ["nsys", "profile"] and "--capture-range=cudaProfilerApi" not in one
    assert one[one.index("torchrun") :] == [
        "torchrun",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "kview.capture.launch",
        "-m",
        "pkg.train",
        "--lr",
        "1",
    ]
    py = c.parse(["python3", "-X", "dev", "-m", "pkg.train", "x"])
    assert c.build(py, "torch", tmp, shapes=False, window=False, one_file=False) == [
        "python3",
        "-X",
        "dev",
        "-m",
        "kview.capture.launch",
        "-m",
        "pkg.train",
        "x",
    ]


def test_steps_the_program_marks_itself_win_over_optimizer_steps(tmp_path):
    script = tmp_path / "two_optimizers.py"
    script.write_text(
        "import torch\nimport kview.capture\n"
        "g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)\n"
        "og, od = torch.optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(d.parameters(), lr=0.1)\n"
        "from torch.nn.modules import module\n"
        "for i in range(3):\n"
        "    d(g(torch.randn(2, 4))).sum().backward()\n"
        "    print('hooks during the step', len(module._global_forward_pre_hooks))\n"
        "    og.step(); od.step()\n"
        "    kview.capture.step()\n"
    )
    out = tmp_path / "gan.sqlite"
    r = kview(
        "capture",
        "--backend",
        "torch",
        "--skip",
        "1",
        "--steps",
        "1",
        "-o",
        str(out),
        "--",
        "python",
        str(script),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # no hook of kview's runs on module calls inside a step (torch.compile never sees one)
    assert r.stdout.count("hooks during the step 0") == 3
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    ((s, e),) = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step_%'").fetchall()
    assert con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'step_%'").fetchone()[0] == "step_2"
    opt = con.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'Optimizer.step#SGD.step%' AND start >= ? AND end <= ?",
        (s, e),
    ).fetchone()[0]
    assert opt == 2  # both optimizers' steps lie inside the one step the program marked
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
    assert meta["CAPTURE_STEP_SOURCE"] == "explicit" and meta["CAPTURE_STEPS"] == "3"


def test_step_ranges_never_cross_the_programs_own_ranges(tmp_path):
    script = tmp_path / "ranged.py"
    script.write_text(
        "import torch\nfrom torch.profiler import record_function\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(4):\n"
        "    with record_function('forward_pass'):\n"
        "        loss = m(torch.randn(2, 4)).sum()\n"
        "    with record_function('backward_pass'):\n"
        "        loss.backward()\n"
        "    with record_function('optimizer_step'):\n"
        "        opt.step(); opt.zero_grad()\n"
    )
    out = tmp_path / "ranged.sqlite"
    r = kview("capture", "--backend", "torch", "--annotate", "-o", str(out), "--", "python", str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    steps = con.execute("SELECT text, start, end FROM NVTX_EVENTS WHERE text LIKE 'step_%' ORDER BY start").fetchall()
    assert [s[0] for s in steps] == ["step_1", "step_2", "step_3", "step_4"]
    user = con.execute(
        "SELECT text, start, end FROM NVTX_EVENTS WHERE text IN ('forward_pass', 'backward_pass', "
        "'optimizer_step', 'Sequential')"
    ).fetchall()
    assert len(user) == 16
    for name, s, e in user:  # each range of the program lies inside exactly one step
        assert sum(a <= s and e <= b for _, a, b in steps) == 1, name
        assert not any(a < s < b < e or s < a < e < b for _, a, b in steps), name
    # steps tile the loop: each starts where the previous one ended, at the next forward_pass
    fwd = sorted(s for n, s, _ in user if n == "forward_pass")
    assert all(a <= f for (_, a, _), f in zip(steps, fwd))


@pytest.mark.parametrize(
    "existing,cmd",
    [("run.sqlite", ["python", "SCRIPT"]), ("run.rank1.sqlite", ["torchrun", "--nproc-per-node", "2", "SCRIPT"])],
)
def test_an_earlier_capture_is_not_overwritten_without_force(tmp_path, existing, cmd):
    (tmp_path / existing).write_bytes(b"earlier")
    cmd = [str(EXAMPLES / "train_tiny.py") if w == "SCRIPT" else w for w in cmd]
    r = kview("capture", "--backend", "torch", "-o", str(tmp_path / "run.sqlite"), "--", *cmd)
    assert r.returncode == 2 and r.stdout == ""  # refused before the program ran
    assert r.stderr.strip() == f"kview capture: output {tmp_path / existing}: exists (give --force to overwrite it)"
    assert (tmp_path / existing).read_bytes() == b"earlier"
