"""The capture session inside a profiled process: steps, the profiled window, module ranges.

`kview capture -- COMMAND` runs the user's program through `python -m kview.capture.launch`,
which starts one Session from the KVIEW_CAPTURE environment variable before the program runs.

Steps. A step ends with an optimizer step (any torch.optim optimizer, outermost call; several
optimizers stepping one after another end one step), unless the program marks its own steps with
`kview.capture.step()` or torch.profiler's `prof.step()`: the most explicit source seen wins from
then on. Step N is a push/pop range `step_N` from the first thing step N does (fetching a batch
from a DataLoader, calling a module, opening a range of its own) to the first thing step N+1
does, so steps tile the loop as ProfilerStep#N does. Those moments are taken only at the top of
the program's own NVTX/record_function nesting (calls through torch.cuda.nvtx and
torch.profiler.record_function are counted), so a step range never crosses a range of the
program (`with nvtx.range("forward_pass"): model(x)` opens the step before `forward_pass`).
A range open when the program ends without finishing its step is dropped by `kview capture`.

With --skip K --steps N only steps K+1..K+N are profiled: under Nsight Systems through the CUDA
profiler API (cudaProfilerStart/Stop, with nsys's `--capture-range=cudaProfilerApi`), under
torch.profiler by starting and stopping it. The program always runs to its end.

Imports only the standard library and torch (kview's core is not needed in the profiled process).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import threading
from pathlib import Path

import torch

from kview.capture import memory_history
from kview.capture.module_ranges import ModuleRanges, Selection, nvtx_ranges, profiler_ranges

ENV = "KVIEW_CAPTURE"
SOURCES = ("optimizer", "profiler", "explicit")  # later = more explicit = wins

_current: Session | None = None


def current() -> Session | None:
    return _current


def step() -> None:
    """Mark the end of a training step (for programs whose steps are not optimizer steps).
    Does nothing outside `kview capture`."""
    if _current is not None and os.getpid() == _current.pid:
        _current.mark("explicit")


class Session:
    def __init__(self, cfg: dict):
        self.backend = cfg["backend"]
        self.dir = Path(cfg["dir"])
        self.window = bool(cfg.get("window"))
        self.skip = int(cfg.get("skip") or 0)
        self.steps = cfg.get("steps")
        self.shapes = bool(cfg.get("shapes"))
        self.annotate = cfg.get("annotate")
        self.memory = bool(cfg.get("memory"))
        self.memory_clock: dict | None = None
        self.pid = os.getpid()
        self.rank = os.environ.get("RANK")
        self.source: str | None = None
        self.done = 0  # steps completed (of the winning source)
        self.open: tuple[int, object] | None = None
        self.armed = False  # the next step opens at the next activity
        self.pending = False  # the open step has ended; it closes at the next activity
        self.profiling = False
        self.window_over = False
        self.profiled: list[int] = []  # completed steps that were profiled
        self.tail: int | None = None  # the step open when the run ended unfinished (dropped)
        self.prof = None
        self.dist_at_start = False
        self.local = threading.local()  # per thread: optimizer call depth, program range depth
        self.module_ranges = None
        self._module_hook = None
        if self.backend == "nsys":
            self._push, self._pop = nvtx_ranges()
        else:
            self._push, self._pop = profiler_ranges()

    def _depth(self) -> int:
        return getattr(self.local, "ranges", 0)

    # ---- setup ---------------------------------------------------------------------------
    def install(self) -> None:
        global _current
        _current = self
        if self.annotate is not None:
            a = self.annotate
            sel = Selection(a.get("depth"), a.get("include"), a.get("exclude"), tuple(a.get("types") or ()))
            ranges = nvtx_ranges() if self.backend == "nsys" else profiler_ranges()
            active = (lambda: True) if self.backend == "nsys" else (lambda: self.profiling)
            # the module ranges' own hook starts a step first, so a step opens before its first range
            self.module_ranges = ModuleRanges(sel, ranges, active, first=self._on_module_call).install_global()
        self._patch_optimizer()
        self._patch_profiler_step()
        self._patch_data_loader()
        self._patch_program_ranges()
        if not self.window:
            self._start_profiling()
        self._arm()

    def _patch_optimizer(self) -> None:
        opt = torch.optim.Optimizer
        original = getattr(opt, "profile_hook_step", None)
        session = self
        if original is None:  # old torch: the global post hook
            torch.optim.optimizer.register_optimizer_step_post_hook(lambda *_: session.mark("optimizer"))
            return

        def profile_hook_step(func):
            wrapped = original(func)

            @functools.wraps(wrapped)
            def step_and_count(*args, **kwargs):
                depth = getattr(session.local, "opt", 0)
                session.local.opt = depth + 1
                try:
                    out = wrapped(*args, **kwargs)
                finally:
                    session.local.opt = depth
                if depth == 0:
                    session.mark("optimizer")
                return out

            return step_and_count

        opt.profile_hook_step = staticmethod(profile_hook_step)

    def _patch_profiler_step(self) -> None:
        cls = torch.profiler.profile
        original = cls.step
        session = self

        @functools.wraps(original)
        def step(prof, *args, **kwargs):
            if prof is not session.prof:
                session.mark("profiler")
            return original(prof, *args, **kwargs)

        cls.step = step

    def _patch_data_loader(self) -> None:
        """Fetching a batch is the first thing a step does: its data loading lies inside it."""
        try:
            from torch.utils.data import dataloader
        except ImportError:
            return
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        session = self

        @functools.wraps(original)
        def __next__(it):
            session._on_activity()
            return original(it)

        cls.__next__ = __next__

    def _patch_program_ranges(self) -> None:
        """Count the program's own open ranges (torch.cuda.nvtx push/pop and record_function), so
        steps open and close only at the top of its nesting; opening a top-level range of its own
        is an activity of the step."""
        session = self
        nvtx = torch.cuda.nvtx
        push, pop = nvtx.range_push, nvtx.range_pop

        def range_push(msg, *a, **k):
            session._on_activity()
            session.local.ranges = session._depth() + 1
            return push(msg, *a, **k)

        def range_pop(*a, **k):
            session.local.ranges = max(session._depth() - 1, 0)
            return pop(*a, **k)

        nvtx.range_push, nvtx.range_pop = range_push, range_pop
        rf = torch.autograd.profiler.record_function
        enter, exit_ = rf.__enter__, rf.__exit__

        def __enter__(self_rf):
            name = str(getattr(self_rf, "name", ""))
            counted = not name.startswith("ProfilerStep#")  # it stays open across the step
            if counted:
                if "#" not in name:  # torch's own (`Optimizer.step#...`) are no activity of a new step
                    session._on_activity()
                session.local.ranges = session._depth() + 1
            self_rf._kview_counted = counted
            return enter(self_rf)

        def __exit__(self_rf, *exc):
            if getattr(self_rf, "_kview_counted", False):
                session.local.ranges = max(session._depth() - 1, 0)
            return exit_(self_rf, *exc)

        rf.__enter__, rf.__exit__ = __enter__, __exit__

    # ---- steps ---------------------------------------------------------------------------
    def _watch_modules(self, on: bool) -> None:
        """A global module hook only while a step waits to open or close (none with --annotate,
        whose hook does it): between steps, no hook of kview's runs on a module call, so code
        compiled with torch.compile during a step never sees one."""
        if self.module_ranges is not None:
            return
        from torch.nn.modules import module as M

        if on and self._module_hook is None:
            self._module_hook = M.register_module_forward_pre_hook(self._on_module_call)
        elif not on and self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None

    def _arm(self) -> None:
        self.armed = True
        self._watch_modules(True)

    def _on_module_call(self, *_args) -> None:
        if self.armed or self.pending:
            self._on_activity()
        return None

    def mark(self, source: str) -> None:
        """A step ended (by `source`); it closes at the next activity. Less explicit sources are
        ignored once a more explicit one has been seen."""
        if os.getpid() != self.pid:
            return
        if self.source is not None and SOURCES.index(source) < SOURCES.index(self.source):
            return
        self.source = source
        self.pending = True
        self._watch_modules(True)

    def _on_activity(self) -> None:
        """Something a step does, at the top of the program's nesting: close the step that ended,
        open the next one."""
        if not (self.armed or self.pending) or self._depth() or os.getpid() != self.pid:
            return
        if self.pending:
            self.pending = False
            self._end_step()
        if self.armed and not self.window_over:
            self.armed = False
            self._open(self.done + 1)
        if not (self.armed or self.pending):
            self._watch_modules(False)

    def _end_step(self) -> None:
        self._close(completed=True)
        self.done += 1
        if self.window and self.steps is not None and self.done >= self.skip + self.steps:
            self._stop_profiling()
        else:
            self._arm()

    def _wanted(self, n: int) -> bool:
        if not self.window:
            return True
        return n > self.skip and (self.steps is None or n <= self.skip + self.steps)

    def _open(self, n: int) -> None:
        if self.window_over or not self._wanted(n):
            return
        if self.window and not self.profiling:
            self._start_profiling()
        self.open = (n, self._push(f"step_{n}"))

    def _close(self, completed: bool = True) -> None:
        if self.open is not None:
            self._pop(self.open[1])
            if completed:
                self.profiled.append(self.open[0])
            self.open = None

    # ---- profiler ------------------------------------------------------------------------
    def _start_profiling(self) -> None:
        if self.profiling or self.window_over:
            return
        if self.backend == "nsys":
            if self.window:
                torch.cuda.profiler.start()
        else:
            from torch.profiler import ProfilerActivity, profile, supported_activities

            acts = [a for a in (ProfilerActivity.CPU, ProfilerActivity.CUDA) if a in supported_activities()]
            # one profiling cycle only; acc_events keeps torch from warning that cycles do not accumulate
            extra = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
            self.prof = profile(activities=acts, record_shapes=self.shapes, **extra)
            self.dist_at_start = _dist_ready()
            self.prof.start()
        self.profiling = True
        if self.memory and torch.cuda.is_available():
            self.memory_clock = memory_history.start(self._marker)

    @contextlib.contextmanager
    def _marker(self, name: str):
        token = self._push(name)
        try:
            yield
        finally:
            self._pop(token)

    def _finish_memory(self) -> None:
        """The allocator history of the profiled window, written before the profiler stops."""
        clock, self.memory_clock = self.memory_clock, None
        if clock is None or not torch.cuda.is_initialized():  # the program never used CUDA
            if clock is not None:
                torch.cuda.memory._record_memory_history(enabled=None)
            return

        memory_history.finish(str(self.dir / f"memory.{self.tag}.pickle"), clock)

    def _stop_profiling(self) -> None:
        if self.open is not None:  # the run ended inside a step that never completed
            self.tail = self.open[0]
            self._close(completed=False)
        self.window_over = True
        if not self.profiling:
            return
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the last step's kernels land inside the window
        self._finish_memory()
        if self.backend == "nsys":
            if self.window:
                torch.cuda.profiler.stop()
        else:
            if _dist_ready() and not self.dist_at_start:
                info = getattr(self.prof, "_get_distributed_info", lambda: None)()
                if info:
                    self.prof.add_metadata_json("distributedInfo", json.dumps(info))
            self.prof.stop()
            self.prof.export_chrome_trace(str(self.dir / f"kineto.{self.tag}.json"))
        self.profiling = False

    @property
    def tag(self) -> str:
        return f"rank{self.rank}" if self.rank is not None else f"pid{self.pid}"

    def finish(self, ok: bool) -> None:
        """Close the open step and the profiler (exporting the trace when the program succeeded),
        and leave a status file for `kview capture`."""
        global _current
        if os.getpid() != self.pid:
            return
        _current = None
        if ok:
            if self.pending:
                self.pending = False
                self._end_step()
            self.armed = False
            self._watch_modules(False)
            self._stop_profiling()
        elif self.prof is not None and self.profiling:
            try:
                self.prof.stop()
            except Exception:
                pass
        used = torch.cuda.is_initialized()
        status = {
            "pid": self.pid,
            "rank": self.rank,
            "steps": self.done,
            "source": self.source or "none",
            "profiled": self.profiled,
            "tail": self.tail,
            "cuda": used,
            "device": torch.cuda.get_device_name() if used else "cpu",
            "torch": torch.__version__,
        }
        (self.dir / f"status.{self.tag}.json").write_text(json.dumps(status))


def _dist_ready() -> bool:
    try:
        return torch.distributed.is_available() and torch.distributed.is_initialized()
    except Exception:
        return False


def start_from_env() -> Session:
    session = Session(json.loads(os.environ[ENV]))
    session.install()
    return session
