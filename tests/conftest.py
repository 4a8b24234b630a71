from __future__ import annotations

import atexit
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN_PUBLIC = ROOT / "tests" / "golden" / "public"

LM_TRACES = sorted(SAMPLES.glob("*_nsys.sqlite"))
TORCH_TRACES = sorted(SAMPLES.glob("*_torch.sqlite"))


def _listed(sources: Path) -> list[str]:
    """The fixture files a SOURCES file names (first column of its table or `file <- origin` lines)."""
    out = []
    for line in sources.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("| file"):
            out.append(line.split("|")[1].strip())
        elif " <- " in line and not line.startswith("#"):
            out.append(line.split(" <- ")[0].strip())
    return out


def _unpack_public() -> Path:
    """The nsys fixtures are stored xz-compressed; decompress them once per test session."""
    folder = Path(tempfile.mkdtemp(prefix="kview-fixtures-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for name in _listed(FIXTURES / "nsys" / "SOURCES.md"):
        packed = FIXTURES / "nsys" / f"{name}.xz"
        if packed.exists():  # a missing one fails test_every_listed_fixture_is_in_the_repository
            with lzma.open(packed) as src, open(folder / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return folder


PUBLIC = _unpack_public()
PUBLIC_NAMES = _listed(FIXTURES / "nsys" / "SOURCES.md")
PUBLIC_TRACES = [PUBLIC / n for n in PUBLIC_NAMES]
KINETO = FIXTURES / "kineto"
KINETO_NAMES = _listed(KINETO / "SOURCES.txt")
KINETO_TRACES = [KINETO / n for n in KINETO_NAMES]


# the MTIA trace's JSON is 87 MB: its own test opens it by default (test_first_contact), the
# repeats of other tests on it are nightly
MTIA = "mtia_trace_single_rank__mtia_rank_0.json.gz"


def nightly_for(paths: list[Path], moved: set[str]) -> list:
    """`paths` as parameters, those named in `moved` in the nightly set only (a slow repeat of
    a shape another trace of the default run has)."""
    return nightly_beyond(paths, {p.name for p in paths} - moved)


def nightly_beyond(paths: list[Path], keep: set[str]) -> list:
    """`paths` as parameters where only those named in `keep` run by default; the others join the
    nightly set (`pytest -m nightly`): the default run keeps one trace of each shape."""
    return [p if p.name in keep else pytest.param(p, marks=pytest.mark.nightly) for p in paths]


def kineto_events(path: Path, cats: tuple[str, ...] | None = None):
    """The events of a torch.profiler trace one at a time (floats kept as Decimal, exact), for
    counting independently of kview; only the events of categories `cats` (lower-cased) when
    given. Streamed, so a 450k-event trace never sits in the test process as Python objects."""
    import gzip
    import json
    import re
    from decimal import Decimal

    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    del raw
    dec = json.JSONDecoder(parse_float=Decimal)
    body = text.lstrip()
    i = text.index("[") + 1 if body[:1] == "[" else re.search(r'"traceEvents"\s*:\s*\[', text).end()
    ws = re.compile(r"[\s,]*")
    while True:
        i = ws.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            return
        e, i = dec.raw_decode(text, i)
        if isinstance(e, dict) and (cats is None or str(e.get("cat", "")).lower() in cats):
            yield e


def golden_public(stem: str, report: str) -> str:
    """nsys stats' CSV of one report of one public fixture (stored xz-compressed)."""
    return lzma.decompress((GOLDEN_PUBLIC / f"{stem}_{report}.csv.xz").read_bytes()).decode()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core and one more; about a third of the suite's time waits on a
    child process (kview, tmux, torchrun) or on the explorer's worker threads, which it fills."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


@pytest.fixture(autouse=True)
def _durations_in_ns():
    """The explorer's duration unit (`u`) is one for every table (a class attribute): a test that
    pressed `u` leaves it to the next test on its worker unless it is put back."""
    yield
    table = sys.modules.get("kview.tui.widgets.frame_table")
    if table is not None:
        table.FrameTable.unit = "ns"


@pytest.fixture(autouse=True)
def _tabs_switch_at_once(monkeypatch):
    """The tabs' underline slides to the view shown over 0.3 s: 18 redraws, which a pilot waits
    for after each key (a third of a view switch's CPU). No test is about the slide: here the
    underline moves at once (TEXTUAL_ANIMATIONS=none, read by each App); the key storms keep it."""
    if "textual.constants" in sys.modules:
        monkeypatch.setattr(sys.modules["textual.constants"], "TEXTUAL_ANIMATIONS", "none")


@pytest.fixture(autouse=True)
def _keys_wait_for_the_kernels_table(monkeypatch):
    """A key in the explorer's Kernels view changes what it shows and the table is made in the
    view's worker: a pilot's `press` returns once that table is shown (it waits for the state,
    not for a time), as a user sees it before the next key."""
    if "textual" not in sys.modules:  # no explorer in this test process
        return
    from textual.pilot import Pilot
    from textual.worker import WorkerCancelled

    press = Pilot.press

    async def press_then_wait(self, *keys: str) -> None:
        workers = self.app.workers
        for key in keys:  # each key sees the table the one before it asked for
            await press(self, key)
            while unfinished := [w for w in workers if w.group == "kernels-regroup" and not w.is_finished]:
                try:
                    await workers.wait_for_complete(unfinished)
                except WorkerCancelled:  # a later key's table replaced it
                    pass
                await self._wait_for_screen()
                await self.pause()

    monkeypatch.setattr(Pilot, "press", press_then_wait)


@pytest.fixture(autouse=True)
def _isolated_cache(request, tmp_path_factory, monkeypatch):
    """No test reads or writes ~/.cache. The tests of a run share one cache folder, every worker
    the same (a trace's tables are made once, then read back as a user's second run reads them:
    the cache is verified before use, and several kview processes may fill it at once, as they
    may a user's); a test about the cache itself (`own_cache`) gets a fresh one."""
    if request.node.get_closest_marker("own_cache") or os.environ.get("KVIEW_TEST_OWN_CACHE"):
        folder = tmp_path_factory.mktemp("cache")
    else:
        # a worker's base folder is popen-gwN inside the run's own folder: the cache sits beside them
        base = tmp_path_factory.getbasetemp()
        folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-cache"
        folder.mkdir(exist_ok=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))


# The child reports its own peak (VmHWM belongs to the memory it has since exec): the ru_maxrss
# of wait4 keeps the high-water mark of the process it was forked from, so a test process that
# grew large (after opening big traces) would be measured instead of kview.
_PEAK = """
import atexit, os, sys
def peak():
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["KVIEW_TEST_PEAK"], "w") as f:
        f.write(str(kib))
atexit.register(peak)
from kview.cli import main
sys.exit(main())
"""


def run_kview_measured(args, env=None) -> tuple[int, str, str, float, float]:
    """(exit status, stdout, stderr, seconds, peak RSS in MiB) of `kview ARGS` in a child."""
    peak_file = os.path.join(tempfile.mkdtemp(), "peak")
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {}), "KVIEW_TEST_PEAK": peak_file},
    )
    out, err = p.communicate()
    seconds = time.perf_counter() - t0
    try:
        with open(peak_file) as f:
            rss = int(f.read()) / 1024
    except (OSError, ValueError):  # no /proc, or the child left without its exit handlers: no figure
        rss = float("nan")
    return p.returncode, out.decode(), err.decode(), seconds, rss


_CAPS_DROPPED: bool | None = None


def _drop_folder_overrides() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, out of the bounding set before exec
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def as_a_user():
    """A child's preexec_fn under which folder permissions apply as they do to a user: root
    keeps its uid but loses the capabilities that let it enter, read and write any folder. None
    when not root (they apply already); skips where the capabilities cannot be dropped."""
    global _CAPS_DROPPED
    if os.geteuid() != 0:
        return None
    if _CAPS_DROPPED is None:
        try:
            subprocess.run([sys.executable, "-c", ""], preexec_fn=_drop_folder_overrides, check=True)
            _CAPS_DROPPED = True
        except (OSError, subprocess.SubprocessError):
            _CAPS_DROPPED = False
    if not _CAPS_DROPPED:
        pytest.skip("root cannot drop CAP_DAC_OVERRIDE here, and enters any folder")
    return _drop_folder_overrides
