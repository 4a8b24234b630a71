"""The explorer shows the Document the command line prints: for each view, the Document its
message carries (and the view's tables come from) renders, as JSON, byte for byte what the
command the Document names prints with -f json. Three traces: the bundled sample, a B200
torch.profiler trace and a two-rank DDP run (plus a trace with its allocator snapshot, for
Memory)."""

from __future__ import annotations

import contextlib
import io
import lzma
import shlex
import shutil

import pytest
from test_tui import loaded

from kview.cli import main
from kview.output.render import render_document

from conftest import FIXTURES, SAMPLES

SAMPLE = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
B200 = FIXTURES / "kineto" / "traces__b200__eager_trace.json.gz"


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    """name -> path of every trace the tests open."""
    folder = tmp_path_factory.mktemp("documents")
    out = {SAMPLE.name: SAMPLE, B200.name: B200}
    for packed in [FIXTURES / "capture" / f"ddp_nsys.rank{r}.sqlite.xz" for r in (0, 1)] + [
        FIXTURES / "memory" / "tiny_train.sqlite.xz",
        FIXTURES / "memory" / "tiny_train.memory.pickle.xz",
    ]:
        path = folder / packed.name.removesuffix(".xz")
        with lzma.open(packed) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out[path.name] = path
    return out


RUNS = {  # the three traces, and a trace with its allocator snapshot beside it (Memory)
    "sample": [SAMPLE.name],
    "b200": [B200.name],
    "ddp": ["ddp_nsys.rank0.sqlite", "ddp_nsys.rank1.sqlite"],
    "memory": ["tiny_train.sqlite"],
}


@pytest.fixture(scope="session")
def shown(files):
    """run -> view -> what the explorer's view holds: its message (with its Document), and the
    frames its widgets show; each run driven once, when a test first asks for it."""
    import asyncio

    from kview.tui.app import KviewApp

    async def drive(names, memory_only):
        app = KviewApp([str(files[n]) for n in names], use_cache=False)
        views = {}
        keys = (("8", "memory"),) if memory_only else VIEW_KEYS
        async with app.run_test(size=(160, 50)) as pilot:
            await loaded(pilot)
            for key, view in keys:
                await pilot.press(key)
                await loaded(pilot)
                v = app.view(view)
                views[view] = (v.data, _widget_frames(v))
            if len(names) > 1:  # Compare's `g`: the regression gate of the last trace against the first
                await pilot.press("5", "g")
                await loaded(pilot)
                views["gate"] = (app.view("compare").data, _widget_frames(app.view("compare")))
            if not memory_only:
                kv = app.view("kernels")
                views["kernels"] = ((kv.attributed or kv.kern_sum), [])
                await pilot.press("6")
                await loaded(pilot)
                views["timeline"] = (app.view("timeline").window_document(), [])
        return views

    class Runs(dict):
        def __missing__(self, run):
            self[run] = asyncio.run(drive(RUNS[run], run == "memory"))
            return self[run]

    return Runs()


VIEW_KEYS = (
    ("1", "overview"),
    ("3", "nvtx"),
    ("4", "layers"),
    ("5", "compare"),
    ("7", "ranks"),
    ("8", "memory"),
    ("9", "efficiency"),
    ("0", "launches"),
)


def _widget_frames(view) -> list:
    """The frames the view's tables show."""
    from kview.tui.widgets.frame_table import FrameTable

    frames = [t.frame for t in view.query(FrameTable)]
    sections = getattr(view, "sections", None)  # the Overview: a section per table
    return frames + [s.frame for s in sections or []]


def cli(doc, files, fmt: str = "json") -> tuple[int, str]:
    """What the command the Document names prints in `fmt` (its file names as paths)."""
    argv = [str(files.get(a, a)) for a in shlex.split(doc.command)[1:]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "-f", fmt])
    return code, out.getvalue()


TRACES = ["sample", "b200", "ddp"]


@pytest.mark.parametrize(
    "run, view",
    [(r, v) for r in TRACES for v in ("overview", "kernels", "nvtx", "layers", "compare", "memory")]
    + [("memory", "memory")],
)
def test_the_view_shows_the_document_the_command_prints(shown, files, run, view):
    data, frames = shown[run][view]
    doc = data.document
    if view == "memory" and doc is None:  # nothing to show: the command says so too (exit 2)
        assert cli_memory(files, RUNS[run][0]) == 2
        return
    if view == "compare" and doc is None:  # one trace without phases: nothing to compare
        return
    code, printed = cli(doc, files)
    assert code == 0 and printed == render_document(doc, "json")
    # the view's tables are the Document's (a view that made its own would differ)
    docs = [s.frame_for(fmt) for s in doc.sections for fmt in ("table", "json")]
    for f in frames:
        if f.height and view != "layers":
            assert any(f.equals(d) for d in docs), (view, f.columns)
    if view == "layers" and frames and doc.frame("layers").height:
        numbers = [c for c in doc.frame("layers").columns]
        assert frames[0].select(numbers).equals(doc.frame("layers"))


@pytest.mark.parametrize("run", TRACES)
def test_the_ranks_view_shows_the_documents_of_ranks_and_iterations(shown, files, run):
    data, frames = shown[run]["ranks"]
    for doc in (data.ranks, data.iterations):
        code, printed = cli(doc, files)
        assert code == 0 and printed == render_document(doc, "json")
    if frames:
        assert frames[0].equals(data.ranks.section("time").frame_for("table"))
        assert frames[1].equals(data.iterations.frame("iterations"))


def cli_memory(files, name) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["memory", str(files[name]), "-f", "json"])


@pytest.mark.parametrize("run", TRACES)
def test_the_timeline_copies_the_picture_and_cells_of_kview_timeline(shown, files, run):
    """The Timeline's copy (its picture, `y`) and export (the numbers behind it, `Y`) are the
    document `kview timeline` prints for that window, width and rows."""
    doc, _ = shown[run]["timeline"]
    assert doc.section("timeline").picture
    for fmt in ("md", "json"):
        code, printed = cli(doc, files, fmt)
        same = printed == render_document(doc, fmt)  # not in the assert: pytest's diff of pictures is slow
        assert code == 0 and same, (fmt, doc.command)


@pytest.mark.parametrize("run, view", [(r, v) for r in TRACES for v in ("launches", "efficiency")] + [("ddp", "gate")])
def test_launches_efficiency_and_the_gate_show_the_documents_their_commands_print(shown, files, run, view):
    """Launches shows `kview launches` and `kview critical-path`, Efficiency `kview efficiency`,
    Compare's gate `kview diff A B --gate 5` (exit 1 when something regressed, as its caption
    says); the table on screen is one of the Document's."""
    data, frames = shown[run][view]
    docs = (data.document, data.critical_path) if view == "launches" else (data.document,)
    for doc in docs:
        code, printed = cli(doc, files)
        assert printed == render_document(doc, "json"), doc.command
        assert code == (1 if view == "gate" and doc.frame("regressed").height else 0)
    assert frames, view
    tables = [s.frame for doc in docs for s in doc.sections]
    for f in frames:
        assert any(f.equals(t) for t in tables), (view, f.columns)
    if view == "gate":  # every gated item on screen, those past the gate in the command's output
        assert frames[0].equals(data.document.frame("items")) and data.document.frame("items").height
