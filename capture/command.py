"""`kview capture [options] -o TRACE.sqlite -- COMMAND [ARGS...]`: profile the user's own program.

The program runs through `python -m kview.capture.launch` (see session.py), which counts steps,
opens the step_N and module ranges and, under torch.profiler, profiles in the program's own
process. Under torchrun every rank runs it and writes its own trace, `TRACE.rank{R}.sqlite`: with
Nsight Systems torchrun starts one `nsys profile -o ...rank%q{RANK}` per rank (`--no-python`),
with the torch backend each rank exports its torch.profiler trace. Reports, exports and status
files go to a temporary folder and only finished traces are moved to the output path, so a failed
program leaves nothing behind, and nothing is ever written beside the user's script.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import kview
from kview.capture.memory_file import drop_range, finalize, memory_name
from kview.capture.process_group import run_in_group
from kview.errors import OutputError, TraceError
from kview.output import files

LAUNCH = ["-m", "kview.capture.launch"]
NO_TORCH = "no-torch"  # the launcher's note in the capture folder: its Python has no torch
PY_OPTS_WITH_VALUE = {"-X", "-W", "-Q"}


class CommandError(Exception):
    """The command cannot be run under the capture hooks (said in one line)."""


@dataclass
class Program:
    """A Python program to run: `python [OPTS] [-m] TARGET ARGS` or `torchrun [OPTS] [-m] TARGET ARGS`."""

    launcher: list[str]  # python [opts]  |  torchrun  |  python -m torch.distributed.run
    module: bool
    target: str
    args: list[str]
    torchrun_opts: list[str] = field(default_factory=list)
    distributed: bool = False
    worker_python: str = sys.executable

    def launched(self) -> list[str]:
        """The user's target and arguments behind the capture launcher."""
        return [*LAUNCH, *(["-m"] if self.module else []), self.target, *self.args]


def _is_python(word: str) -> bool:
    return bool(re.fullmatch(r"python[\d.]*", Path(word).name)) or word == sys.executable


def _shebang_python(exe: str) -> str:
    """The interpreter a console script (torchrun) runs under; the workers use the same."""
    try:
        path = shutil.which(exe) or exe
        with open(path, "rb") as f:
            first = f.readline().decode("utf-8", "replace").strip()
        if first.startswith("#!"):
            words = first[2:].split()
            if words and Path(words[0]).name == "env" and len(words) > 1:
                return shutil.which(words[1]) or words[1]
            if words:
                return words[0]
    except OSError:
        pass
    return sys.executable


def _script(path: str) -> str:
    """`path` when it is a file; else CommandError naming it and the nearest .py beside it
    (`tran.py`: did you mean train.py?), before anything runs."""
    if Path(path).is_file():
        return path
    import difflib

    folder = Path(path).parent
    try:
        near = sorted(p.name for p in folder.iterdir() if p.suffix == ".py")
    except OSError:
        near = []
    close = difflib.get_close_matches(Path(path).name, near, n=1, cutoff=0.6)
    hint = (
        f" (did you mean {shlex.quote(str(folder / close[0]) if str(folder) != '.' else close[0])}?)" if close else ""
    )
    what = "is a folder, not a script" if Path(path).is_dir() else "no such script"
    raise CommandError(f"{shlex.quote(path)}: {what}{hint}")


def parse(cmd: list[str]) -> Program:
    if not cmd:
        raise CommandError("no command after `--` (e.g. kview capture -o run.sqlite -- python train.py)")
    head = cmd[0]
    if head.endswith(".py"):
        return Program([sys.executable], False, _script(head), cmd[1:])
    if Path(head).name == "torchrun":
        return _torchrun([head], cmd[1:], _shebang_python(head))
    if not _is_python(head):
        raise CommandError(
            f"cannot profile `{head}`: give `python SCRIPT`, `python -m MODULE`, a .py script, or `torchrun ...`"
        )
    i, opts = 1, []
    while i < len(cmd) and cmd[i].startswith("-") and cmd[i] != "-m":
        if cmd[i] in ("-c", "-"):
            raise CommandError("`python -c` and stdin programs cannot be profiled: save the code as a script")
        opts.append(cmd[i])
        if cmd[i] in PY_OPTS_WITH_VALUE and i + 1 < len(cmd):
            opts.append(cmd[i + 1])
            i += 1
        i += 1
    rest = cmd[i:]
    if not rest:
        raise CommandError(f"no script or module after `{shlex.join(cmd)}`")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise CommandError("`-m` needs a module name")
        if rest[1] in ("torch.distributed.run", "torch.distributed.launch"):
            return _torchrun([head, *opts, "-m", rest[1]], rest[2:], head)
        return Program([head, *opts], True, rest[1], rest[2:])
    return Program([head, *opts], False, _script(rest[0]), rest[1:])


def _torchrun(launcher: list[str], rest: list[str], python: str) -> Program:
    try:
        from torch.distributed.run import get_args_parser
    except ImportError as e:
        raise CommandError(f"reading torchrun's options needs torch here ({e})") from None
    try:
        ns = get_args_parser().parse_args(rest)
    except SystemExit:
        raise CommandError(f"torchrun does not accept these options: {shlex.join(rest)}") from None
    if ns.no_python:
        raise CommandError("torchrun --no-python runs no Python program: kview can profile only Python programs")
    script, args = ns.training_script, list(ns.training_script_args)
    at = next((i for i in range(len(rest)) if rest[i] == script and rest[i + 1 :] == args), None)
    if at is None:
        raise CommandError(f"cannot find the training script in `torchrun {shlex.join(rest)}`")
    opts = [o for o in rest[:at] if o not in ("-m", "--module")]
    return Program(launcher, ns.module, script if ns.module else _script(script), args, opts, True, python)


def nsys_options(shapes: bool, window: bool, memory: bool = False) -> list[str]:
    return (
        [
            "--trace=cuda,nvtx,osrt",
            "--sample=none",
            "--cpuctxsw=none",
            f"--pytorch={'autograd-shapes-nvtx' if shapes else 'autograd-nvtx'}",
            "--force-overwrite",
            "true",
        ]
        + (["--cuda-memory-usage=true"] if memory else [])
        + (["--capture-range=cudaProfilerApi", "--capture-range-end=stop"] if window else [])
    )


def build(
    prog: Program, backend: str, tmp: Path, *, shapes: bool, window: bool, one_file: bool, memory: bool = False
) -> list[str]:
    """The command line that runs the program under the chosen backend."""
    if backend == "torch":
        if prog.distributed:
            return [*prog.launcher, *prog.torchrun_opts, *prog.launched()]
        return [*prog.launcher, *prog.launched()]
    nsys = ["nsys", "profile", *nsys_options(shapes, window, memory)]
    if prog.distributed and not one_file:  # one nsys per rank, each writing its own report
        return [
            *prog.launcher,
            *prog.torchrun_opts,
            "--no-python",
            *nsys,
            "-o",
            str(tmp / "trace.rank%q{RANK}"),
            prog.worker_python,
            "-u",
            *prog.launched(),
        ]
    if prog.distributed:
        return [*nsys, "-o", str(tmp / "trace"), *prog.launcher, *prog.torchrun_opts, *prog.launched()]
    return [*nsys, "-o", str(tmp / "trace"), *prog.launcher, *prog.launched()]


def _package_link(tmp: Path) -> Path:
    """A folder holding only a link to this kview package, put first on the program's
    PYTHONPATH so its interpreter finds the launcher without seeing kview's other dependencies."""
    import importlib.util

    d = tmp / "py"
    pkg = d / "kview"
    pkg.mkdir(parents=True)
    # From a checkout the subpackages live beside the core package (a package-dir mapping that
    # only the installed finder knows): the link folder puts them back under one kview/.
    core = Path(kview.__file__).resolve().parent
    for entry in core.iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for sub in ("capture", "models", "tui"):
        spec = importlib.util.find_spec(f"kview.{sub}")
        if spec and spec.submodule_search_locations and not (pkg / sub).exists():
            (pkg / sub).symlink_to(Path(spec.submodule_search_locations[0]).resolve(), target_is_directory=True)
    return d


def output_name(out: Path, tag: str | None) -> Path:
    """TRACE.sqlite for one process; TRACE.rank{R}.sqlite per rank."""
    if tag is None:
        return out
    return out.with_name(f"{out.name[: -len(out.suffix)]}.{tag}{out.suffix}")


@dataclass
class Outcome:
    written: list[Path]
    statuses: list[dict]
    notes: list[str]


def check_outputs(out: Path, prog: Program, keep_json: bool, force: bool, memory: bool = False) -> None:
    """Refuse before the program runs: the output folder must exist, and no trace of an earlier
    capture is overwritten without --force (per rank: any TRACE.rank*.sqlite)."""

    files.check([out], [], True)
    # the name is literal (`run[1].sqlite` is that file): only the rank number is a pattern
    stem = glob.escape(out.name[: -len(out.suffix)])
    suffix = glob.escape(out.suffix)
    names = [f"{stem}.rank*{suffix}"] if prog.distributed else [f"{stem}{suffix}"]
    if keep_json:
        names.append(f"{stem}.rank*.json.gz" if prog.distributed else f"{stem}.json.gz")
    if memory:
        names.append(f"{stem}.rank*.memory.pickle" if prog.distributed else f"{stem}.memory.pickle")
    existing = sorted(p for n in names for p in out.parent.glob(n))
    if existing and not force:
        raise OutputError(existing[0], "exists (give --force to overwrite it)")


def run(
    cmd: list[str],
    out: Path,
    *,
    backend: str,
    skip: int | None,
    steps: int | None,
    shapes: bool,
    annotate: dict | None,
    one_file: bool,
    keep_json: bool,
    force: bool = False,
    memory: bool = False,
) -> Outcome:
    prog = parse(cmd)
    check_outputs(out, prog, keep_json, force, memory)
    window = skip is not None or steps is not None
    with tempfile.TemporaryDirectory(prefix="kview-capture-") as t:
        tmp = Path(t)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_package_link(tmp)), *filter(None, [env.get("PYTHONPATH")])])
        env["KVIEW_CAPTURE"] = json.dumps(
            {
                "backend": backend,
                "dir": str(tmp),
                "window": window,
                "skip": skip or 0,
                "steps": steps,
                "shapes": shapes,
                "annotate": annotate,
                "memory": memory,
            }
        )
        full = build(prog, backend, tmp, shapes=shapes, window=window, one_file=one_file, memory=memory)
        where = "Nsight Systems" if backend == "nsys" else "torch.profiler"
        print(f"kview capture: running `{shlex.join(cmd)}` under {where}", file=sys.stderr)
        try:
            rc = run_in_group(full, tmp=tmp, env=env).returncode
        except FileNotFoundError as e:
            raise CommandError(f"cannot start `{full[0]}`: {e.strerror}") from None
        no_torch = sorted(tmp.glob(f"{NO_TORCH}.*"))
        if rc != 0 and no_torch:  # the launcher could not import torch: the program never ran
            raise CommandError(
                f"torch is not installed in {no_torch[0].read_text()} (the Python that runs the program): "
                "install it there (pip install torch); no trace written"
            )
        if rc != 0:
            code = 128 - rc if rc < 0 else rc
            raise CommandFailed(code, f"`{shlex.join(cmd)}` failed (exit {code}); no trace written")
        statuses = [json.loads(p.read_text()) for p in sorted(tmp.glob("status.*.json"))]
        if window and statuses and not any(s["profiled"] for s in statuses):
            done = max(s["steps"] for s in statuses)
            raise CommandError(
                f"the program completed {done} step(s), so --skip {skip or 0} left nothing to profile; no trace written"
            )
        made = _nsys_exports(tmp) if backend == "nsys" else _torch_exports(tmp, statuses, " ".join(sys.argv))
        if not made:
            raise CommandError("the program ran but no trace was recorded; no trace written")
        tails = {_tag(s): s["tail"] for s in statuses if s.get("tail")}
        for tag, db, _ in made:
            for n in [tails[tag]] if tag in tails else list(tails.values()) if tag is None else []:
                drop_range(db, f"step_{n}")
        single = len(made) == 1 and not prog.distributed
        plan = [(src, output_name(out, None if single else tag), js) for tag, src, js in made]
        notes = _notes(statuses, steps)
        snapshots = _memory_snapshots(tmp, made, notes) if memory else {}
        written = []
        for src, dst, js in plan:
            shutil.move(str(src), dst)
            written.append(dst)
            if keep_json and js is not None:
                with open(js, "rb") as f, gzip.open(dst.with_suffix(".json.gz"), "wb") as g:
                    shutil.copyfileobj(f, g)
            if src in snapshots:
                shutil.move(str(snapshots[src]), memory_name(dst))
                written.append(memory_name(dst))
        return Outcome(written, statuses, notes)


def _memory_snapshots(tmp: Path, made: list, notes: list[str]) -> dict[Path, Path]:
    """trace -> its allocator history (memory.{tag}.pickle of the process that wrote it), each
    aligned with its trace (memory_file.finalize)."""

    found = {p.name[len("memory.") : -len(".pickle")]: p for p in tmp.glob("memory.*.pickle")}
    pairs = {}
    for tag, db, _ in made:
        snap = found.get(tag) if tag is not None else (next(iter(found.values())) if len(found) == 1 else None)
        if snap is None:
            continue
        note = finalize(snap, db)
        if note:
            notes.append(f"--memory: {note}")
        pairs[db] = snap
    if not found:
        notes.append("--memory: no allocator history was recorded (the program used no CUDA device)")
    return pairs


class CommandFailed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _tag(status: dict) -> str:
    return f"rank{status['rank']}" if status["rank"] is not None else f"pid{status['pid']}"


def _nsys_exports(tmp: Path) -> list[tuple[str | None, Path, None]]:
    made = []
    for rep in sorted(tmp.glob("trace*.nsys-rep")):
        m = re.fullmatch(r"trace\.(rank\d+)\.nsys-rep", rep.name)
        db = rep.with_suffix(".sqlite")
        r = subprocess.run(
            ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(db), str(rep)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0 or not db.exists():
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
            raise TraceError(rep, f"nsys export failed (exit {r.returncode}): {tail[0]}")
        made.append((m[1] if m else None, db, None))
    return made


def _torch_exports(tmp: Path, statuses: list[dict], command: str) -> list[tuple[str | None, Path, Path]]:
    # deferred: polars and the Kineto reader, for the torch backend only
    from kview.capture.nsys_schema_writer import convert_kineto

    by_tag = {_tag(s): s for s in statuses}
    made = []
    for js in sorted(tmp.glob("kineto.*.json")):
        tag = js.name[len("kineto.") : -len(".json")]
        s = by_tag.get(tag, {})
        info = {
            "backend_command": command,
            "rank": s.get("rank"),
            "steps": s.get("steps"),
            "step_source": s.get("source"),
            "profiled_steps": ",".join(map(str, s.get("profiled", []))),
            "device": s.get("device"),
            "torch": s.get("torch"),
        }
        db = tmp / f"{tag}.sqlite"
        convert_kineto(js, db, {k: v for k, v in info.items() if v is not None}, command)
        made.append((tag if tag.startswith("rank") else None, db, js))
    return made


def _notes(statuses: list[dict], steps: int | None) -> list[str]:
    notes = []
    if statuses and not any(s["cuda"] for s in statuses):
        notes.append("ran on the CPU: no CUDA device was used, so the trace holds CPU ops and no GPU kernels")
    for s in statuses:
        got = s["profiled"]
        who = f"rank {s['rank']}" if s["rank"] is not None else "the program"
        if steps is not None and 0 < len(got) < steps:
            notes.append(f"{who} ran only {s['steps']} step(s): profiled steps {got[0]}-{got[-1]}, not {steps}")
    if statuses:
        s = statuses[0]
        if s["profiled"]:
            notes.append(
                f"steps {s['profiled'][0]}-{s['profiled'][-1]} as ranges step_N (counted at each "
                f"{'optimizer step' if s['source'] == 'optimizer' else s['source'] + ' step mark'})"
                if s["source"] != "none"
                else "no step was counted (no optimizer step or step mark)"
            )
    return notes
