"""Pilot tests of every TUI binding on a sample trace, snapshot tests of each view, and the
tmux script that drives the real binary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from textual.command import CommandPalette  # noqa: E402
from textual.worker import WorkerCancelled  # noqa: E402

from kview.reports import cuda_gpu_kern_sum  # noqa: E402
from kview.trace import Trace, open_trace  # noqa: E402
from kview.tui.app import KviewApp  # noqa: E402

from conftest import KINETO_TRACES, PUBLIC, PUBLIC_TRACES, ROOT, SAMPLES, nightly_beyond  # noqa: E402

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")
LM_FWD = str(SAMPLES / "lm-small_ctx256_forward_nsys.sqlite")

_OPENED: dict[str, Trace] = {}


def explorer(*paths: str) -> KviewApp:
    """The explorer over `paths` as `kview PATH ...` starts it (the CLI opens and checks each
    trace and hands it to the app), each trace opened once per test process and shared by the
    tests that show it: its store makes each table once, the same tables whichever test asks."""
    for p in paths:
        if p not in _OPENED:
            _OPENED[p] = open_trace(p, use_cache=False)
    return KviewApp(list(paths), use_cache=False, traces=[_OPENED[p] for p in paths])


async def loaded(pilot):
    """Wait for the loading workers and the Compare worker they start, then for the views to
    handle what the workers posted (each pause runs every queued message)."""
    workers = pilot.app.workers
    while unfinished := [w for w in workers if not w.is_finished]:
        try:
            await workers.wait_for_complete(unfinished)
        except WorkerCancelled:  # the app quit while loading (damage found in the trace)
            pass
        await pilot.pause()


def screen_text(app) -> str:
    """What the screen shows, as text (the SVG screenshot with its non-breaking spaces undone)."""
    import html

    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def test_first_frame_and_kernel_summary_equal_the_report():
    app = KviewApp([LM], use_cache=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert app.query_one("#tabs").active == "kernels"  # the first frame exists before data
        await loaded(pilot)
        kv = app.view("kernels")
        rep = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame
        assert kv.table.frame["Total Time (ns)"].to_list() == rep["Total Time (ns)"].to_list()
        assert kv.table.frame["_full"].to_list() == rep["Name"].to_list()
        assert "sm80_xmma_gemm" in screen_text(app)


async def test_filter_copy_markdown_and_tsv(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DISPLAY", raising=False)
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("2", "slash", *"xmma", "enter")
        kv = app.view("kernels")
        assert kv.filter_text == "xmma"
        names = kv.table.frame["_full"].to_list()
        assert names and all("xmma" in n for n in names)
        await pilot.press("y")
        md = app.clipboard.splitlines()
        assert md[0].startswith("| Time (%) | Total Time (ns) |") and md[1].startswith("|---:")
        assert len(md) == 2 + len(names) and all("xmma" in line for line in md[2:])
        await pilot.press("Y")
        tsv = app.clipboard.splitlines()
        assert tsv[0].split("\t")[:2] == ["Time (%)", "Total Time (ns)"] and len(tsv) == 1 + len(names)
        files = list((tmp_path / "kview" / "copies").iterdir())
        assert sorted(f.suffix for f in files) == [".md", ".tsv"]
        # a malformed filter keeps the old one and says why
        await pilot.press("slash", *"dur>5parsecs", "enter")
        assert kv.filter_text == "xmma"
        await pilot.press("escape")


async def test_toggle_grouping_sort_drill_in_and_back():
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        await pilot.press("t")
        assert kv.mode == "rows" and kv.table.frame.height == 3117
        assert kv.table.columns[:6] == ["Idx", "Direction", "Layer", "Op", "Params", "Kernel"]
        await pilot.press("t", "g")
        assert kv.table.columns[8] == "Short name"
        await pilot.press("g")
        assert kv.table.columns[8] == "Category"
        await pilot.press("right", "right")  # cursor on Instances
        await pilot.press("S")
        inst = kv.table.sorted_frame()["Instances"].to_list()
        assert inst == sorted(inst, reverse=True) and kv.table.sort_state == ("Instances", True)
        await pilot.press("s")
        assert kv.table.sorted_frame()["Instances"].to_list() == sorted(inst)
        await pilot.press("home", "enter")  # instances of the first group
        cat = kv.pick[1]
        assert kv.mode == "rows" and set(kv.table.frame["Category"]) == {cat}
        await pilot.press("escape")
        assert kv.mode == "summary" and kv.pick is None


@pytest.mark.parametrize("early", [False, True])
async def test_the_nvtx_view_fetches_last_unless_shown_before_its_turn(early, monkeypatch):
    """The NVTX view holds what it makes of the range tables from when it fetches: after every
    other view (on a large trace, once the worker's last batch is written); shown before its
    turn, it fetches at once."""
    import threading

    from kview.tui.views.base import View

    order: list[str] = []
    # the Kernels view (in front) holds its document until the key is pressed and every other
    # view waits its turn behind it: the key comes before the NVTX view's turn on a machine under
    # any load, not only when the app is slower than the pilot
    pressed = threading.Event()
    fetch = View.fetch

    def recorded(self, trace):
        order.append(self.view_id)
        if early and self.view_id == "kernels":
            document = type(self).document_of(self, trace)

            def held(trace, use_cache):
                pressed.wait(60)
                yield from document(trace, use_cache)

            monkeypatch.setattr(self, "document_of", lambda trace: held)
        fetch(self, trace)

    monkeypatch.setattr(View, "fetch", recorded)
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        if early:
            for _ in range(3000):  # a minute at most
                if "kernels" in order:
                    break
                await pilot.pause(0.02)
            await pilot.press("3")
            pressed.set()
        await loaded(pilot)
    assert set(order) == {"kernels", "nvtx", "timeline", "memory", "overview", "efficiency", "launches", "layers"}
    if early:
        assert order[:2] == ["kernels", "nvtx"]
    else:
        assert order[0] == "kernels" and order[-1] == "nvtx" and order.index("timeline") < order.index("overview")


@pytest.mark.parametrize("large", [False, True])
async def test_nvtx_tree_enter_opens_kernels_filtered(large, monkeypatch):
    if large:  # its tables made in a worker, the tree read from its files in part
        from kview.tui import prepare

        monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)
    # a trace of its own when large (the shared one's store holds the tree whole already)
    app = KviewApp([LM], use_cache=False, traces=[open_trace(LM, use_cache=False)]) if large else explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        # behind the Kernels view the NVTX view has its document, its tree made but not mounted
        # (no layout of the screen for it yet); its tab coming forward mounts it, with the keys
        nv = app.view("nvtx")
        assert nv.data is not None and nv.data.paths.height > 0
        assert ("Path" in nv.data.paths.columns) is not large
        assert isinstance(nv.data.windows, pl.DataFrame) is not large
        assert not app.query("#nvtx-tree") and nv._unshown is not None
        await pilot.press("3")
        await pilot.pause()
        tree = app.query_one("#nvtx-tree")
        assert tree is nv.range_tree and app.focused is tree and nv._unshown is None
        labels = [str(n.label) for n in tree.root.children]
        assert any(lbl.startswith("profiled_step") for lbl in labels)
        node = next(n for n in tree.root.children if str(n.label).startswith("profiled_step"))
        tree.move_cursor(node)
        await pilot.press("space")  # expand
        await pilot.pause()
        kids = [str(n.label).split()[0] for n in node.children]
        assert {"forward_pass", "backward_pass", "optimizer_step"} <= set(kids)
        fwd = next(n for n in node.children if str(n.label).startswith("forward_pass"))
        tree.move_cursor(fwd)
        await pilot.pause()
        assert str(nv.detail.render()) == "profiled_step > forward_pass"
        shown = nv.shown().frame
        assert shown["Path"].to_list()[:1] == ["profiled_step"] and "profiled_step > forward_pass" in shown["Path"]
        await pilot.press("enter")
        await pilot.pause()
        kv = app.view("kernels")
        assert app.query_one("#tabs").active == "kernels" and kv.state.scope.label == "profiled_step > forward_pass"
        assert kv.mode == "rows" and set(kv.table.frame["Direction"]) == {"fprop"}
        assert kv.table.frame.height == 784


async def test_layers_order_compare_overview_help_export_palette_quit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = explorer(LM, LM_FWD)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        lt = app.query_one("#layers-table")
        assert lt.frame["Layer"].to_list()[:3] == ["layer_0", "layer_1", "layer_2"]
        assert "█" in lt.frame["Fwd █ Bwd ▓"][0] and "▓" in lt.frame["Fwd █ Bwd ▓"][0]
        assert "▓" in lt.frame["Sublayers"][0]  # attention vs ffn split of the same total
        await pilot.press("o")
        tot = lt.sorted_frame()["Total (ns)"].to_list()
        assert tot == sorted(tot, reverse=True)
        await pilot.press("5")
        ct = app.query_one("#compare-table")
        assert ct.frame.columns[:3] == ["Range", "train", "forward"]  # what tells the traces apart
        fwd = ct.frame.filter(pl.col("Range") == "forward_pass").row(0, named=True)
        assert abs(fwd["Δ% forward"]) < 3
        await pilot.press("1")
        shot = screen_text(app)
        assert "GPU busy" in shot and "Time by category" in shot and "NVIDIA H200" in shot
        assert any(
            f.startswith("Launch-bound")
            for f in app.view("overview").data.document.frame("findings")["Finding"].to_list()
        )
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        help_text = str(app.screen.query_one("#help-text").render())
        assert "Copy what is shown as Markdown" in help_text and "Quit" in help_text
        await pilot.press("escape")
        await pilot.press("2", "e")
        assert type(app.screen).__name__ == "PickScreen"
        await pilot.press("down", "enter")  # csv
        await pilot.pause()
        out = tmp_path / "lm-small_ctx256_train_nsys_kernels_by_name.csv"
        assert out.exists() and out.read_text().startswith("Time (%),Total Time (ns)")
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"View: Layers")
        await loaded(pilot)  # the palette's search, the input's suggester: workers
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#tabs").active == "layers"
        await pilot.press("q")
    assert app.return_code in (0, None)


OPENABLE = [p for p in [*PUBLIC_TRACES, *KINETO_TRACES] if not p.name.startswith("rocprof")]
# one trace of each shape by default (the CLI runs every command on all of them in test_first_contact);
# the CPU-only trace's views are every key's storm's (test_tui_keystorm), the B200 trace's every view
# is compared with its command's document (test_documents)
OPEN_BY_DEFAULT = {
    "dlprof_lenet_nsys2022.1.sqlite",  # the oldest nsys schema
    "nsysai_h100_2gpu_fsdp_nsys2026.2.sqlite",  # the newest, two GPUs, NCCL
    "vecadd_nsys2025.5.sqlite",  # no NVTX
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # AMD
    "resnet50_plugin_oldest.pt.trace.json.gz",  # the oldest torch.profiler
    "traces__inference__vllm_decode_full__graph_execution.json.gz",  # CUDA graphs
}


@pytest.mark.parametrize("path", nightly_beyond(OPENABLE, OPEN_BY_DEFAULT), ids=lambda p: p.name.split(".")[0])
async def test_public_fixtures_open_in_every_view(path):
    """Every public trace opens and every view shows, kernels or not (the rocprof file is
    refused before the TUI starts: test_kineto_eras)."""
    app = KviewApp([str(path)], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        assert kv.table.frame.height > 0
        if kv.kern_sum.note:  # no GPU kernels: the view says so and shows the CPU op times
            assert kv.kern_sum.note.startswith("no GPU kernels") and "Calls" in kv.table.frame.columns
            for key in ("t", "g", "slash"):  # kernel keys explain instead of failing
                await pilot.press(key)
                await pilot.pause()
        views = {"1": "overview", "2": "kernels", "3": "nvtx", "4": "layers", "5": "compare", "6": "timeline"}
        views["7"] = "ranks"
        for key in "1345672":
            await pilot.press(key)
            await pilot.pause()
            assert app.query_one("#tabs").active == views[key]
        assert app.return_code is None  # still running: no view died


async def test_torch_profiler_json_opens_in_the_tui():
    app = explorer(str(SAMPLES / "bert-2l_seq128_train_torch.json.gz"))
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"layer:Q_Proj cat:gemm", "enter", "t")
        kv = app.view("kernels")
        assert kv.mode == "rows" and set(kv.table.frame["Direction"]) == {"fprop", "bprop"}
        await pilot.press("4")
        assert app.query_one("#layers-table").frame["Layer"].to_list() == ["Enc_0", "Enc_1"]


@pytest.mark.parametrize("view", ["1", "2", "3", "4", "5", "7"])
def test_snapshot_of_each_view(snap_compare, view):
    async def run_before(pilot):
        await loaded(pilot)
        await pilot.press(view)
        await pilot.pause()

    assert snap_compare(explorer(LM), terminal_size=(120, 36), run_before=run_before)


def test_snapshot_at_80x24(snap_compare):
    """The first screen a user sees in a default terminal: the kernel summary at 80x24."""

    async def run_before(pilot):
        await loaded(pilot)

    assert snap_compare(explorer(LM), terminal_size=(80, 24), run_before=run_before)


def test_each_view_fetches_its_own_document_one_frozen_message_per_thing_ready():
    from dataclasses import FrozenInstanceError

    from kview.analysis.layers import phase_times
    from kview.tui.messages import (
        AttributedKernels,
        EfficiencyReady,
        KernelSummary,
        LaunchesReady,
        LayersReady,
        MemoryReady,
        NvtxTree,
        OverviewReady,
        Stage,
        TimelineReady,
    )
    from kview.tui.views import VIEWS

    trace = open_trace(LM, use_cache=False)
    documents = {cls.view_id: cls.document for cls in VIEWS if cls.document is not None}
    # Compare and Ranks show every trace: they make their tables in their own workers
    assert set(documents) == {cls.view_id for cls in VIEWS} - {"compare", "ranks"}
    got = {vid: list(doc(trace, False)) for vid, doc in documents.items()}
    assert all(isinstance(m[0], Stage) for m in got.values())  # each view says what it waits for
    messages = {vid: [m for m in ms if not isinstance(m, Stage)] for vid, ms in got.items()}
    assert {vid: [type(m) for m in ms] for vid, ms in messages.items()} == {
        "overview": [OverviewReady],
        "kernels": [KernelSummary, AttributedKernels],
        "nvtx": [NvtxTree],
        "layers": [LayersReady],
        "timeline": [TimelineReady, TimelineReady],
        "memory": [MemoryReady],  # no allocator history beside the sample: the sentence saying so
        "efficiency": [EfficiencyReady],
        "launches": [LaunchesReady],
    }
    summary, attributed = messages["kernels"]
    gpu_rows, timeline = messages["timeline"]
    [tree], [layers], [memory] = messages["nvtx"], messages["layers"], messages["memory"]
    assert gpu_rows.cpu_pending and {r.kind for r in gpu_rows.timeline.rows} == {"gpu"}
    assert not timeline.cpu_pending and {r.kind for r in timeline.timeline.rows} == {"gpu", "api", "nvtx"}
    assert timeline.attributed is attributed.table  # the same kernels, so the two views agree
    assert memory.timeline is None and "kview capture --memory" in memory.note
    rep = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame
    assert summary.frame.equals(rep)
    assert attributed.table.height == 3117 and {"_short", "_range"} <= set(attributed.table.columns)
    assert attributed.names == tuple(sorted(set(attributed.table["Kernel"])))
    assert tree.trace_name == "lm-small_ctx256_train_nsys.sqlite" and tree.paths.height > 0
    assert layers.layers["Layer"].to_list()[:2] == ["layer_0", "layer_1"]
    assert phase_times(trace)["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"]
    with pytest.raises(FrozenInstanceError):
        summary.frame = rep
    # every message of a view's document is one that view handles itself
    handlers = {cls.view_id: cls for cls in VIEWS}
    for vid, ms in messages.items():
        for m in ms:
            assert m.view == vid and hasattr(handlers[vid], m.handler_name), (vid, m.handler_name)


def _tmux_env():
    """The script runs `kview`: the one installed beside this interpreter, whatever PATH says.
    Its cache is the run's shared one (conftest): a trace another test opened is read back, as
    on a user's second run, not made again (about a CPU second per run, in a process that tmux
    starts, out of the suite's sight)."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
def test_tmux_script_drives_the_real_binary(size):
    env = _tmux_env()
    r = subprocess.run(
        # with a second trace: the switcher (] and T) on the real binary
        [
            "bash",
            str(ROOT / "tests" / "tmux_smoke.sh"),
            LM,
            str(size[0]),
            str(size[1]),
            "xmma",
            "profiled_step",
            LM_FWD,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout[-3000:] + r.stderr[-2000:]


async def test_damage_found_while_loading_ends_the_app_with_one_line(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1}, {"ph": } ]}')
    app = KviewApp([str(bad)], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
    assert app.return_code == 2


FIXTURE_WORDS = {
    "nsysai_h100_2gpu_fsdp_nsys2026.2.sqlite": ("elementwise", "aten::"),
    "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite": ("nccl", "aten::"),
    "dlprof_lenet_nsys2022.1.sqlite": ("cudnn", "traceMarker"),
    "vecadd_nsys2025.5.sqlite": ("VectorAdd", "no NVTX"),
}


# the FSDP run before its fix is a second nsys 2026.2 export of the two-GPU FSDP run (the H100 one
# runs by default): a slow repeat, in the nightly set
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
@pytest.mark.parametrize(
    "fixture",
    [
        pytest.param(f, marks=pytest.mark.nightly) if f == "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite" else f
        for f in sorted(FIXTURE_WORDS)
    ],
)
def test_tmux_script_on_public_fixtures(fixture):
    path = PUBLIC / fixture
    word, nvtx = FIXTURE_WORDS[fixture]
    env = _tmux_env()
    r = subprocess.run(
        ["bash", str(ROOT / "tests" / "tmux_smoke.sh"), str(path), "80", "24", word, nvtx],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout[-3000:] + r.stderr[-2000:]
