"""The `kview` command line. Subcommands never import Textual or torch.

Every command is one `Command` in COMMANDS: its name, help, own options and the function that
runs it. The flags several commands share (-f, -o, --force, --no-cache, --max-memory) come from
parent parsers and are accepted anywhere on the line, before the command name too
(`kview --no-cache -f csv kernels T` is `kview kernels T -f csv --no-cache`). `kview TRACE`
(no command) hands over to the TUI, and `kview capture`/`kview bench` to the capture package;
both are imported by module name only when asked for, so the core keeps its one-way
dependencies and `kview stats` starts fast on a box without them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kview import __version__, atomic_write
from kview.errors import (
    KviewError,
    OutOfMemory,
    TraceError,
    UsageError,
    debugging,
    internal_error_line,
    is_out_of_memory,
    no_library_threads_under_a_limit,
    shown,
)
from kview.formats import FORMATS, MULTI_TABLE_FORMATS
from kview.io import memory_budget
from kview.io.paths import named
from kview.output import files
from kview.output.stdout_guard import StdoutGuard
from kview.output.visible import VisibleText, visible_lines


def _trace_flags(defaults: bool) -> argparse.ArgumentParser:
    """How a trace is opened: every command that reads one, and the explorer. With `defaults`
    False the flags default to nothing, so a command's copy never overwrites what was given
    before the command name."""

    def d(value):
        return value if defaults else argparse.SUPPRESS

    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("opening a trace")
    g.add_argument("--no-cache", action="store_true", default=d(False), help="do not read or write the frame cache")
    g.add_argument(
        "--max-memory",
        default=d(None),
        metavar="SIZE",
        help="memory kview may plan for (e.g. 8G; default: KVIEW_MAX_MEMORY, else the memory available: the "
        "least of the system's, the memory cgroup's and ulimit -v's); a JSON trace, or NVTX nested so deep "
        "that pairing its ranges needs more, is refused",
    )
    return p


def _document_flags(defaults: bool) -> argparse.ArgumentParser:
    """What a viewing command writes: its format and where."""

    def d(value):
        return value if defaults else argparse.SUPPRESS

    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("output")
    g.add_argument(
        "-f",
        "--format",
        default=d(None),
        choices=FORMATS,
        help="output format (default: from -o's extension: .csv, .tsv, .md, .json; else table)",
    )
    g.add_argument(
        "-o",
        "--output",
        default=d(None),
        metavar="PATH",
        help="write the output to PATH instead of stdout (stats: one file per report, PATH_<report>.<ext>); "
        "never over an existing file unless --force, never over the trace",
    )
    g.add_argument("--force", action="store_true", default=d(False), help="with -o: overwrite existing output files")
    return p


class Command:
    """One `kview NAME ...` command: how it is described, its own options, what runs it. (A plain
    class: dataclasses would load inspect and ast, a fifth of `kview --help`'s imports.)"""

    __slots__ = ("name", "help", "run", "options", "description", "shared", "one_document")

    def __init__(
        self,
        name: str,
        help: str,
        run: Callable[[argparse.Namespace], int],
        options: Callable[[argparse.ArgumentParser], None] = lambda p: None,
        description: str | None = None,
        shared: bool = True,  # takes the shared flags; False: handed every argument (capture, bench)
        one_document: bool = True,  # -o PATH is that document's file (stats: a prefix, one file per report)
    ):
        self.name = name
        self.help = help
        self.run = run
        self.options = options
        self.description = description
        self.shared = shared
        self.one_document = one_document


def _stats_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="Nsight Systems .sqlite export (or torch.profiler .json/.json.gz)")
    p.add_argument(
        "-r",
        "--report",
        default=None,
        help="comma-separated report names (default: nsys's default set); 'all' for every report",
    )


def _kernels_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument("--filter", default="", help='e.g. "dir:bprop layer:Enc_0 gemm dur>10us"')
    p.add_argument(
        "--absolute",
        action="store_true",
        help="add each op's start on the clock the file records (UTC for nsys exports) beside Start (ns), "
        "which counts from the trace's zero",
    )


def _layers_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument("--pattern", default=None, help="regex for layer range names (default: detected, e.g. ^layer_\\d+$)")


def _one_trace(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")


def _compare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="+")
    p.add_argument("--root", default=None, help="restrict each trace to its last instance of this range")
    p.add_argument("--metric", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--by", default="range", choices=["range", "category", "kernel", "layer"])
    p.add_argument("--ranges", default=None, help="one trace: put these ranges side by side (comma list)")
    p.add_argument(
        "--ranks",
        action="store_true",
        help="the traces (files, a folder) are the ranks of one run: one column per rank, then the spread across "
        "them (the default for one trace holding several processes or GPUs)",
    )
    _cluster_options(p)


def _diff_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--top", type=int, default=15)
    p.add_argument(
        "--gate",
        action="append",
        default=None,
        metavar="[SCOPE:]PCT",
        help="exit 1, printing what got slower from BEFORE to AFTER by more than PCT percent (exit 0: nothing "
        "did); SCOPE is total, step, phase, layer, category or kernel (repeat the flag: --gate layer:5%% "
        "--gate total:2%%); a bare PCT gates every scope. With several steps on both sides, per-step medians "
        "are compared",
    )
    p.add_argument(
        "--gate-min",
        type=float,
        default=1.0,
        metavar="PCT",
        help="leave out of the gate items under PCT percent of the run's GPU time on both sides (default 1)",
    )


EFFICIENCY_TABLES = ("gpus", "steps", "layers", "categories", "kernels", "tensor-cores", "peaks")


def _efficiency_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument(
        "--table",
        default=None,
        choices=EFFICIENCY_TABLES,
        help="print only this table (one table is what -f csv/tsv can hold); peaks: the GPU peak table kview uses",
    )
    p.add_argument(
        "--gpu",
        default=None,
        metavar="NAME",
        help="measure against this GPU's peaks (e.g. H100-SXM, MI300X) instead of the one the trace names",
    )


RUN_TABLES = {
    "ranks": ("ranks", "time", "collectives", "stragglers", "waits"),
    "iterations": ("iterations", "statistics"),
}


def _run_options(name: str) -> Callable[[argparse.ArgumentParser], None]:
    def options(p: argparse.ArgumentParser) -> None:
        p.add_argument("traces", nargs="+", metavar="TRACE")
        p.add_argument(
            "--table",
            default=None,
            choices=RUN_TABLES[name],
            help="print only this table (one table is what -f csv/tsv can hold)",
        )
        _cluster_options(p)

    return options


def _cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="summarize each rank file on a worker of this Dask cluster (tcp://HOST:8786), or of a local cluster of "
        "N worker processes (local:N); needs the cluster extra",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="with --cluster: the folder the workers write each rank file's summary into and a rerun reads them "
        "from (on a file system every worker and this machine share; default with local:N: kview's cache folder)",
    )


LAUNCH_TABLES = ("kernels", "ops", "queue", "idle", "gaps", "queue-series")


def _launches_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument(
        "--table",
        default=None,
        choices=LAUNCH_TABLES,
        help="print only this table (one table is what -f csv/tsv can hold); queue-series: every change of "
        "every stream's queue length (only with --table)",
    )
    p.add_argument("--top", type=int, default=20, help="gaps: the longest N idle gaps (0: every one; default 20)")
    p.add_argument(
        "--kernel-wait",
        type=int,
        default=None,
        metavar="NS",
        help="a gap between queued ops shorter than this is the GPU's own (kernel wait; default 30 ns, HTA's)",
    )


def _critical_path_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument(
        "--table", default=None, choices=("steps", "ops"), help="print only this table (what -f csv/tsv can hold)"
    )
    p.add_argument("--top", type=int, default=20, help="ops: the N largest (0: every one; default 20)")


def _timeline_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="a trace; several (or a folder) are the ranks of one run, drawn on one timeline grouped by rank",
    )
    p.add_argument(
        "--from",
        dest="t_from",
        default=None,
        metavar="T",
        help="start of the window, from the trace's start (1.5s, 200ms, 30us, or ns); default: the first op",
    )
    p.add_argument("--to", dest="t_to", default=None, metavar="T", help="end of the window (default: the last op)")
    p.add_argument("--width", type=int, default=None, help="characters per line (default: the terminal's, else 120)")
    p.add_argument("--rows", default="gpu,api,nvtx", help="which rows: a comma list of gpu, api, nvtx")
    p.add_argument("--depth", type=int, default=3, help="NVTX rows down to this many levels (default 3)")


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace (nsys .sqlite export or torch.profiler .json/.json.gz)")
    p.add_argument(
        "--from",
        dest="t_from",
        default=None,
        metavar="T",
        help="start of the window, from the trace's start (1.5s, 200ms, 30us, or ns); default: the trace's start",
    )
    p.add_argument("--to", dest="t_to", default=None, metavar="T", help="end of the window (default: the trace's end)")
    p.add_argument(
        "--filter",
        default=None,
        help="only the GPU ops this filter matches (the kernels filter language), with their launches",
    )


def _handed_over(p: argparse.ArgumentParser) -> None:
    p.add_argument("rest", nargs=argparse.REMAINDER)


MEMORY_TABLES = ("summary", "timeline", "phases", "steps", "by-site", "by-size", "top")


def _memory_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace", metavar="FILE", help="a memory snapshot (.pickle, .gz/.xz too) or a trace with one beside it"
    )
    p.add_argument("--device", type=int, default=None, help="CUDA device index (default: the one with most events)")
    p.add_argument("--top", type=int, default=15, help="rows of each table (default: 15)")
    p.add_argument("--width", type=int, default=None, help="plot width (default: the terminal's, at most 160)")
    p.add_argument("--height", type=int, default=12, help="plot rows (default: 12)")
    p.add_argument(
        "--table",
        default=None,
        choices=MEMORY_TABLES,
        help="print only this table (csv/tsv need one; timeline = every event's allocated, requested and reserved bytes)",
    )


def _report_names(arg: str | None) -> list[str]:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.reports import DEFAULT_REPORTS, REPORTS

    if not arg:
        return list(DEFAULT_REPORTS)
    names = [n.strip() for n in arg.split(",") if n.strip()]
    if names == ["all"]:
        return list(REPORTS)
    unknown = [n for n in names if n not in REPORTS]
    if unknown:
        raise UsageError(f"unknown report {', '.join(unknown)} (known: {', '.join(REPORTS)})")
    return names


def _one_table_per_document(fmt: str, what: str, hint: str) -> None:
    """CSV and TSV on stdout are exactly one table, so a pipe gets a document it can parse."""

    if fmt not in MULTI_TABLE_FORMATS:
        raise UsageError(f"{what} do not fit one {fmt.upper()} document on stdout: {hint}")


FORMAT_OF_EXTENSION = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".md": "md", ".markdown": "md", ".json": "json"}


def _resolve_format(args) -> None:
    """Without -f, a document written to -o PATH takes the format its extension names
    (`-o k.csv` is CSV); anything else is the table."""
    if getattr(args, "format", "") is None:
        out = getattr(args, "output", None)
        one = getattr(getattr(args, "cmd", None), "one_document", True)
        args.format = FORMAT_OF_EXTENSION.get(Path(out).suffix.lower(), "table") if out and one else "table"


def _inputs(args) -> list[str]:
    """Every file this command line reads, never written over: the traces named, the files of a
    folder named, a SQLite trace's journal, and for `memory` the snapshot or the trace beside
    it. The output is compared with them by device and inode (files.check)."""
    given = [a for n in ("trace", "before", "after") if (a := getattr(args, n, None))] + list(
        getattr(args, "traces", None) or []
    )
    out: list[str] = []
    for a in given:
        p = named(a)
        out += [str(p), *(f"{p}{journal}" for journal in ("-wal", "-journal", "-shm"))]
        try:
            if p.is_dir():
                out += [str(f) for f in p.iterdir()]
        except OSError:  # a folder the user cannot read: nothing in it is read either
            pass
        if args.command == "memory":
            # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
            from kview.analysis.memory_timeline import trace_beside
            from kview.io.snapshot_pickle import memory_name

            out += [str(memory_name(p))] + [str(t) for t in [trace_beside(p)] if t is not None]
    return out


def _open(args, path: str):
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.trace import open_trace

    try:
        folder = args.command not in ("compare", "ranks", "iterations") and Path(path).is_dir()
    except OSError:  # a folder on the way the user cannot enter: open_trace says so
        folder = False
    if folder:  # a folder of per-rank traces: say which commands read a run
        from kview.analysis.ranks import trace_paths

        n = len(trace_paths([path]))  # a folder without traces says so itself
        raise TraceError(
            Path(path),
            f"is a folder of {n} trace{'s' if n > 1 else ''}: `kview {args.command}` reads one trace; "
            f"`kview ranks`, `kview iterations`, `kview timeline`, `kview compare --ranks` and the explorer (`kview {path}`) read a "
            f"folder as the ranks of one run",
        )
    return open_trace(path, use_cache=not args.no_cache)


def _check_output(args) -> None:
    """-o PATH of a one-document command: refused before any work (an input, an existing file)."""
    if args.output:
        files.check([Path(args.output)], _inputs(args), args.force)


def _write(args, text: str) -> int:
    """The command's document: to stdout, or to -o PATH (atomically; nothing for no data)."""

    text = visible_lines(text)  # names from the trace hold no control character (JSON escapes them)
    if not args.output:
        sys.stdout.write(text)
        return 0

    if not text:
        print(f"kview: nothing to write: no file written to {args.output}", file=sys.stderr)
        return 0
    files.write({Path(args.output): text}, _inputs(args), args.force)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _emit(args, frame, decimals=None) -> int:
    """One table as the command's document: streamed to stdout as polars writes it (a million rows
    never become one string), or written to -o PATH as _write does."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.output import render

    if args.output:
        if not files.write_streamed(
            Path(args.output), lambda out: render.write(frame, args.format, out, decimals), _inputs(args), args.force
        ):
            print(f"kview: nothing to write: no file written to {args.output}", file=sys.stderr)
            return 0
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    render.emit(frame, args.format, decimals)
    return 0


def _show(args, doc, table: str | None = None, texts=None, stream: bool = False) -> int:
    """The command's Document in args.format (`table`: that section alone) to stdout or -o PATH;
    with `stream`, a document that is one table is streamed as polars writes it (_emit)."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.output import render

    one = render.one_table(doc, args.format, table) if stream else None
    if one is not None and one.picture is None:
        frame = one.frame_for(args.format)
        return _emit(args, frame) if render.written(doc, frame, args.format) else _write(args, "")
    return _write(args, render.render_document(doc, args.format, table, texts))


def _say(notes, trace=None) -> None:
    """A document's notes on stderr (about `trace`, when given), so stdout stays the document."""
    for note in notes:
        print(f"kview: {trace.name}: {note}" if trace is not None else f"kview: {note}", file=sys.stderr)


def _count_impossible_rows_beside(trace) -> None:
    """The GPU tables' impossible rows (the remark `stats` makes after its reports) counted on a
    thread while reports that read none of those tables are made: its read of the kernels' times
    (0.4 CPU s on a 1M-kernel trace) ran after them, on one core's worth of the critical path."""
    import threading

    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.sanity import counts

    def count() -> None:
        try:
            counts(trace)
        except Exception:  # noqa: BLE001 - the remark asks again and says what went wrong there
            pass

    threading.Thread(target=count, name="impossible rows", daemon=True).start()


def cmd_stats(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.quick_stats import answer

    quick = answer(args)  # a small trace's kernel summary, from SQLite with the standard library
    if quick is not None:
        return quick
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.output import render
    from kview.reports import NO_GPU_TABLES, REPORTS

    names = _report_names(args.report)
    if args.output:
        ext = render.EXTENSIONS[args.format]
        targets = {n: Path(f"{args.output}_{n}.{ext}") for n in names}
        files.check(list(targets.values()), _inputs(args), args.force)  # refused before the work
    elif len(names) > 1:
        _one_table_per_document(
            args.format,
            f"{len(names)} reports",
            "write one file per report with -o PREFIX, pick one with -r NAME, "
            "or use -f json (one object keyed by report name)",
        )
    trace = _open(args, args.trace)
    if all(n in NO_GPU_TABLES for n in names):
        _count_impossible_rows_beside(trace)
    reports = []  # all computed before anything is written
    for i, n in enumerate(names):
        # nothing after the last report asks for the tables it makes of the trace: it may let
        # them go once used (the NVTX ranges, their names and nesting are gigabytes when dense)
        trace.one_command = i == len(names) - 1
        reports.append(REPORTS[n](trace))

    def remark(table: bool = False) -> None:
        """One stderr line on what has no data (stdout stays the document): reports without
        rows or skipped (the table format says so inline), and where CPU op times are."""
        parts = []
        # inline in a table, [] in a JSON object of several; one report or files: say so here
        alone = not table and (args.output or len(reports) == 1)
        empty = [r for r in reports if r.skipped or r.empty] if alone else []
        if any(r.skipped for r in empty):
            parts.append("skipped " + ", ".join(f"{r.name} ({r.skipped})" for r in empty if r.skipped))
        if any(not r.skipped for r in empty):
            parts.append("no rows in " + ", ".join(r.name for r in empty if not r.skipped))
        if empty and args.output:
            parts.append("no file written for " + ("it" if len(empty) == 1 else "those"))
        # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
        from kview.analysis.sanity import warning

        bad = warning(trace)
        if bad:  # nsys's numbers are kept, as nsys computes them; the user hears what is in them
            parts.append(f"{bad} (counted as they are, as nsys stats does)")
        if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
            # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
            from kview.analysis.cpu_ops import holdings

            if holdings(trace)["CPU ops"]:
                parts.append(f"no GPU kernels; `kview kernels {args.trace}` summarizes the CPU op times")
        if parts:
            _say(["; ".join(parts)], trace)

    if args.output:
        documents = {
            targets[r.name]: partial(render.write, r.frame, args.format, decimals=r.decimals)
            for r in reports
            if not (r.skipped or r.empty)
        }
        files.write_streamed_all(documents, _inputs(args), args.force)  # each streamed, as _emit's
        for path in documents:
            print(f"wrote {path}", file=sys.stderr)
        remark()
        return 0
    out = sys.stdout
    if args.format == "table":  # for a person: every report under its nsys title
        width = render.terminal_columns()
        for i, r in enumerate(reports):
            if i:
                out.write("\n")
            out.write(f"** {r.title} ({r.name}):\n\n")
            if r.skipped:
                out.write(
                    visible_lines("\n".join(render.wrap_text(f"SKIPPED: {trace.name} {r.skipped}.", width)) + "\n")
                )
            elif r.empty:
                out.write("(no rows)\n")
            else:
                out.write(render.render(r.frame, args.format, r.decimals))
        remark(table=True)
        return 0
    remark()
    if len(reports) == 1:  # exactly that document, nothing around it
        r = reports[0]
        if not (r.skipped or r.empty):
            render.emit(r.frame, args.format, r.decimals)
        elif args.format == "json":
            render.emit(r.frame, args.format)
        return 0
    if args.format == "json":
        render.emit_json_object({r.name: r.frame for r in reports})
        return 0
    sections = {f"{r.title} ({r.name})": r.frame for r in reports}
    skipped = {f"{r.title} ({r.name})": f"SKIPPED: {trace.name} {r.skipped}.\n" for r in reports if r.skipped}
    out.write(visible_lines(render.render_sections(sections, args.format, empty="(no rows)\n", texts=skipped)))
    return 0


def cmd_kernels(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis import filters
    from kview.analysis.attribution import attribute
    from kview.documents.kernels import kernels

    try:
        pred = filters.parse(args.filter)
    except filters.FilterError as e:
        raise UsageError(str(e), what="--filter") from None
    trace = _open(args, args.trace)
    trace.ranges_only_for_attribution = trace.only_attribution = True
    table = attribute(trace)
    trace.store.clear()  # only the table is written from here on
    doc = kernels(trace, pred, args.absolute, args.filter, table)
    _say(doc.notes, trace)
    return _show(args, doc, stream=True)


def cmd_layers(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.layers import layers

    trace = _open(args, args.trace)
    doc = layers(trace, args.pattern)
    _say(doc.notes, trace)
    return _show(args, doc)


def cmd_overview(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.overview import overview

    _one_table_per_document(
        args.format, "the overview's tables", "use -f json (one object keyed by table), md or table"
    )
    trace = _open(args, args.trace)
    # nothing else asks for the ranges in this process: let them go once the Overview made its tables of them,
    # their names during attribution (the Overview makes what else it asks of them first)
    trace.one_command = True
    trace.ranges_only_for_attribution = True
    return _show(args, overview(trace))


def cmd_nvtx(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.nvtx import nvtx

    trace = _open(args, args.trace)
    doc = nvtx(trace)
    _say(doc.notes, trace)
    return _show(args, doc)


def cmd_phases(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.layers import phases

    trace = _open(args, args.trace)
    doc = phases(trace)
    _say(doc.notes, trace)
    return _show(args, doc)


def cmd_compare(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.compare import check_metric
    from kview.analysis.ranks import make_run, trace_paths
    from kview.documents import compare

    if args.cache_dir is not None and args.cluster is None:
        raise UsageError("goes with --cluster (the folder its workers write into)", what="--cache-dir")
    if args.cluster is not None:  # the ranks of one run, each file's columns made on a worker
        if args.ranges:
            raise UsageError("--ranges compares phases within one trace; --cluster compares ranks")
        check_metric(args.by, args.metric)
        summarized, failed = _summarized_run(args, (args.by, args.metric, args.root))
        for note in summarized.notes:
            print(f"kview: {note}", file=sys.stderr)
        if not summarized.ranks:
            names = ", ".join(Path(f).name for f in summarized.files)
            raise UsageError("no GPU work in " + names + ": no ranks to compare")
        doc = compare.summarized(summarized, args.by, args.metric, args.cluster)
        code = _show(args, doc)
        return _partial(failed, len(summarized.files)) if failed else code
    traces = [_open(args, str(t)) for t in trace_paths(args.traces)]  # a folder is its traces
    run = make_run(traces) if args.ranks or (len(traces) == 1 and not args.ranges) else None
    if run is not None and (args.ranks or len(run.ranks) > 1):
        if args.ranges:
            raise UsageError("--ranges compares phases within one trace; --ranks compares ranks")
        for note in run.notes:
            print(f"kview: {note}", file=sys.stderr)
        if not run.ranks:
            raise UsageError("no GPU work in " + ", ".join(t.name for t in traces) + ": no ranks to compare")
        doc = compare.ranks(run, [t.name for t in traces], args.by, args.metric, args.root)
    elif args.ranges:
        if len(traces) != 1:
            raise UsageError("--ranges compares phases within one trace; give exactly one trace")
        doc = compare.phases(traces[0], [r for r in args.ranges.split(",") if r], args.by, args.metric, args.root)
    else:
        doc = compare.traces(traces, args.by, args.metric, args.root)
    return _show(args, doc)


def cmd_diff(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.diff import diff

    if args.gate:
        return _diff_gate(args)
    _one_table_per_document(args.format, "the diff's tables", "use -f json (one object keyed by table), md or table")
    doc = diff(_open(args, args.before), _open(args, args.after), args.top)
    _say(doc.notes)
    return _show(args, doc)


def _diff_gate(args) -> int:
    """`kview diff A B --gate ...`: the table of what regressed past its gate; exit 1 when any did."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.gate import parse_gates
    from kview.documents.diff import gate

    parse_gates(args.gate)  # a malformed gate is refused before any trace is read
    if args.gate_min < 0:
        raise UsageError("--gate-min takes a percentage of 0 or more")
    doc, verdict = gate(_open(args, args.before), _open(args, args.after), args.gate, args.gate_min)
    _say(doc.notes)
    # a machine format is a document even when nothing regressed (a header, `[]`); a person reads stderr
    _show(args, doc)
    return 1 if verdict.regressed.height else 0


def cmd_efficiency(args) -> int:
    """`kview efficiency`: achieved against the GPU's peak per step, layer, category and kernel."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.gpu_peaks import named_gpu
    from kview.documents import efficiency as eff

    if args.table is None:
        _one_table_per_document(
            args.format,
            "the efficiency tables",
            "pick one with --table NAME, or use -f json (one object keyed by table), md or table",
        )
    gpu = named_gpu(args.gpu) if args.gpu else None
    if args.table == "peaks":  # the table itself: no trace needed beyond the argument
        return _show(args, eff.peaks(Path(args.trace).name))
    trace = _open(args, args.trace)
    doc = eff.efficiency(trace, gpu)
    _say(doc.notes, trace)
    return _show(args, doc, args.table)


def cmd_run_tables(args) -> int:
    """`kview ranks` and `kview iterations`: the tables of a run, every one or the one asked for."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.ranks import open_run_traces
    from kview.documents import ranks

    if args.table is None:
        _one_table_per_document(
            args.format,
            f"the {args.command} tables",
            "pick one with --table NAME, or use -f json (one object keyed by table), md or table",
        )
    failed = 0
    if args.cache_dir is not None and args.cluster is None:
        raise UsageError("goes with --cluster (the folder its workers write into)", what="--cache-dir")
    if args.cluster is not None:
        summarized, failed = _summarized_run(args)
        doc = ranks.summarized(summarized, args.command)
    else:
        doc = ranks.of_traces(open_run_traces(args.traces, use_cache=not args.no_cache), args.command)
    _say(doc.notes)
    code = _show(args, doc, args.table)
    return _partial(failed, len(summarized.files)) if failed else code


def _partial(failed: int, good: int) -> int:
    print(f"kview: {failed} of {good + failed} rank files failed: the tables leave them out", file=sys.stderr)
    return PARTIAL_EXIT


# `kview ranks/iterations/compare --cluster`: some rank files failed (each named on stderr), the tables hold the others
PARTIAL_EXIT = 3


def _summarized_run(args, compare: tuple[str, str, str | None] | None = None):
    """The run of args.traces summarized rank file by rank file on args.cluster (with `compare`:
    by, metric, root, its columns of `kview compare --ranks`), with how many files failed (each
    said on stderr as it fails, progress as each file is done)."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.rank_files import Step, SummarizedRun
    from kview.analysis.ranks import trace_paths
    from kview.cluster import summarize_run

    cache_dir = _cluster_cache_dir(args)
    files = [os.path.abspath(f) for f in trace_paths(args.traces)]
    width = len(str(len(files)))

    def progress(n: int, total: int, done) -> None:
        name = shown(Path(done.path).name)
        if done.tables is None:
            print(f"kview: {shown(done.path)}: {done.problem}", file=sys.stderr)
        else:
            how = "read from the cache" if done.cached else "summarized"
            print(f"kview: [{n:>{width}}/{total}] {name} {how}", file=sys.stderr)

    outcome = summarize_run(args.cluster, files, Step(cache_dir, compare=compare), progress)
    good = [(d.path, d.tables) for d in outcome if d.tables is not None]
    if not good:
        raise TraceError(files[0] if len(files) == 1 else f"{len(files)} rank files", "none could be summarized")
    return SummarizedRun([p for p, _ in good], [t for _, t in good]), len(outcome) - len(good)


def _cluster_cache_dir(args) -> str:
    """The folder of the rank files' summaries (--cache-dir, made if missing; with a local
    cluster kview's cache folder by default), checked with --cluster."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.io.cache import cache_root

    if args.cache_dir is None and not args.cluster.startswith("local"):
        raise UsageError("needs --cache-dir DIR on a file system its workers share with this machine", "--cluster")
    cache_dir = os.path.abspath(args.cache_dir or cache_root() / "rank-files")
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot be made ({e.strerror})", what=f"--cache-dir {shown(cache_dir)}") from None
    return cache_dir


def cmd_launches(args) -> int:
    """`kview launches`: launch cost and delay per kernel and per op, queue length and idle time
    by cause per stream, the longest idle gaps with the CPU call around them."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.launches import launches

    if args.table is None:
        _one_table_per_document(
            args.format,
            "the launch tables",
            "pick one with --table NAME, or use -f json (one object keyed by table), md or table",
        )
    if args.top < 0:
        raise UsageError(f"--top takes a count of 0 or more, not {args.top}")
    if args.kernel_wait is not None and args.kernel_wait < 0:
        raise UsageError(f"--kernel-wait takes nanoseconds, 0 or more, not {args.kernel_wait}")
    trace = _open(args, args.trace)
    doc = launches(trace, args.top, args.kernel_wait, args.table)
    _say(doc.notes, trace)
    return _show(args, doc, args.table, stream=args.table is not None)


def cmd_critical_path(args) -> int:
    """`kview critical-path`: each step's critical path (length, GPU/CPU/launch time, bound by)
    and what the paths spend their time in."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.documents.launches import critical_path

    if args.table is None:
        _one_table_per_document(
            args.format,
            "the critical path tables",
            "pick one with --table NAME, or use -f json (one object keyed by table), md or table",
        )
    if args.top < 0:
        raise UsageError(f"--top takes a count of 0 or more, not {args.top}")
    doc = critical_path(_open(args, args.trace), args.top, args.table)
    return _show(args, doc, args.table, stream=args.table is not None)


def cmd_timeline(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    import shutil

    from kview.analysis import timeline
    from kview.documents.timeline import window

    kinds = {k.strip() for k in args.rows.split(",") if k.strip()}
    if not kinds or kinds - {"gpu", "api", "nvtx"}:
        raise UsageError(f"--rows takes a comma list of gpu, api, nvtx, not {args.rows!r}")
    width = args.width or shutil.get_terminal_size((120, 24)).columns
    if width < 30:
        raise UsageError(f"--width {width} leaves no room for the picture (at least 30)")
    if args.depth < 1:
        raise UsageError("--depth takes 1 or more")
    try:
        t_from = timeline.parse_time(args.t_from) if args.t_from is not None else None
        t_to = timeline.parse_time(args.t_to) if args.t_to is not None else None
    except ValueError as e:
        raise UsageError(str(e), what="--from/--to") from None
    if t_from is not None and t_to is not None and t_to <= t_from:
        raise UsageError(f"the window is empty (--from {args.t_from} is not before --to {args.t_to})")
    cpu = bool(kinds & {"api", "nvtx"})
    try:
        folder = Path(args.traces[0]).is_dir()
    except OSError:  # a folder on the way the user cannot enter: open_trace says so
        folder = False
    if len(args.traces) == 1 and not folder:
        trace = _open(args, args.traces[0])
        tl, title = timeline.build(trace, cpu=cpu), trace.name
    else:  # the ranks of one run, as `kview ranks` reads them
        from kview.analysis.ranks import open_run

        run = open_run(args.traces, use_cache=not args.no_cache)
        for note in run.notes:
            print(f"kview: {note}", file=sys.stderr)
        trace = run.traces[0]
        names = [t.name for t in run.traces]
        # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
        from kview.analysis.run_clock import run_clock

        clock = run_clock(run.traces)
        if clock.note:
            print(f"kview: {clock.note}", file=sys.stderr)
        tl = timeline.of_run([timeline.build(t, cpu=cpu) for t in run.traces], run.units, names, clock)
        title = names[0] if len(names) == 1 else f"{len(names)} traces ({names[0]} .. {names[-1]})"
    if not tl.rows:
        _say(["nothing to put on a timeline (no GPU ops, CUDA API calls or NVTX ranges)"], trace)
    t0 = tl.span[0] if t_from is None else t_from
    t1 = tl.span[1] if t_to is None else t_to
    if t1 <= t0:
        raise UsageError(f"the window is empty (it ends at {timeline.fmt_span(t1)}, before it starts)")
    return _show(args, window(tl, t0, t1, width, kinds, args.depth, title))


def cmd_export(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis import chrome_trace, filters, timeline
    from kview.output import chrome_json

    if not args.output:
        raise UsageError("give -o FILE.json (or FILE.json.gz): the Chrome trace to write", what="-o")
    try:
        if args.filter:
            filters.parse(args.filter)
        t_from = timeline.parse_time(args.t_from) if args.t_from is not None else None
        t_to = timeline.parse_time(args.t_to) if args.t_to is not None else None
    except filters.FilterError as e:
        raise UsageError(str(e), what="--filter") from None
    except ValueError as e:
        raise UsageError(str(e), what="--from/--to") from None
    if t_from is not None and t_to is not None and t_to <= t_from:
        raise UsageError(f"the window is empty (--from {args.t_from} is not before --to {args.t_to})")
    trace = _open(args, args.trace)
    w = chrome_trace.Window(t_from, t_to, args.filter)
    export = chrome_trace.build(trace, w)
    path = Path(args.output)
    other = chrome_trace.other_data(trace, w, export)
    files.write_streamed(
        path, lambda out: chrome_json.write(export, out, other, path.name.endswith(".gz")), _inputs(args), args.force
    )
    print(f"wrote {args.output} ({export.ops:,} GPU ops, {export.events:,} events)", file=sys.stderr)
    return 0


def cmd_external(args) -> int:
    module_name = {"capture": "kview.capture.cli", "bench": "kview.capture.benchmark"}[args.command]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(
            f"`kview {args.command}` needs the capture extra (pip install 'kview[capture]'): {e}"
        ) from None
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    return module.main(rest)


def cmd_memory(args) -> int:
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    import shutil

    from kview.analysis import memory
    from kview.analysis import memory_timeline as mt
    from kview.documents.memory import PLOT
    from kview.documents.memory import memory as memory_document
    from kview.output.memory_plot import plot

    if args.table is None:
        _one_table_per_document(
            args.format, "the memory tables", f"give --table ({', '.join(MEMORY_TABLES)}), or use -f json, md or table"
        )
    tl = memory.open_memory(args.trace, args.device, use_cache=not args.no_cache)
    doc = memory_document(tl, args.top)
    texts = {}
    if args.format == "table" and not args.table:
        width = args.width or min(shutil.get_terminal_size((100, 24)).columns, 160)
        texts[PLOT] = (
            "\n".join(plot(tl.series, tl.phases, width, args.height, tl.peak, zero=tl.start, level=mt.level_word(tl)))
            + "\n"
        )
    return _show(args, doc, args.table, texts)


COMMANDS = [
    Command(
        "stats",
        "nsys-compatible summary reports (same numbers as `nsys stats`)",
        cmd_stats,
        _stats_options,
        "Reports identical to `nsys stats --format csv`, without nsys.",
        one_document=False,
    ),
    Command(
        "kernels",
        "one row per GPU kernel: direction, layer, op, shapes, category, FLOPs",
        cmd_kernels,
        _kernels_options,
        "Per-kernel attribution table. Filter language: bare words match kernel "
        "names; dir:, layer:, op:, cat:, range:, stream:, device:, kernel:; dur>50us, "
        "grid>1024; a leading - negates; terms AND together.",
    ),
    Command("layers", "GPU time per repeated layer (forward/backward, sublayers)", cmd_layers, _layers_options),
    Command(
        "overview",
        "trace facts, GPU busy share, idle gaps, time by category and phase, findings",
        cmd_overview,
        _one_trace,
    ),
    Command("phases", "GPU time per phase (forward_pass, backward_pass, optimizer_step, ...)", cmd_phases, _one_trace),
    Command(
        "nvtx",
        "GPU and CPU time per NVTX range path, parents before children (the explorer's NVTX tree)",
        cmd_nvtx,
        _one_trace,
        "One row per NVTX (or record_function) range path: its depth, instances, the GPU time of the work "
        "launched while it was open (from any thread), the CPU time it was open, and its GPU ops.",
    ),
    Command(
        "compare",
        "traces side by side, or phases within one trace",
        cmd_compare,
        _compare_options,
        "Rows are ranges (or categories, kernels, layers), one column per trace "
        "(or per --ranges phase), then the difference of each later column to the first.",
    ),
    Command("diff", "what changed between two runs (kernels, counts, phases)", cmd_diff, _diff_options),
    Command(
        "efficiency",
        "achieved against the GPU's peak: MFU, bandwidth and roofline per step, layer, category and kernel; FP32 "
        "GEMMs that could use tensor cores",
        cmd_efficiency,
        _efficiency_options,
        "Achieved against the peak of the GPU the trace ran on (its name in the trace; --gpu NAME otherwise): "
        "MFU (%) = the time the FLOPs need at the peak of each kernel's precision over the time taken, bandwidth "
        "(%) = bytes / (time x memory bandwidth), roofline position per kernel. FLOPs and bytes are kview's (GEMM "
        "shapes, elementwise element counts, copies).",
    ),
    Command(
        "export",
        "a window of the trace as Chrome trace JSON for ui.perfetto.dev or chrome://tracing",
        cmd_export,
        _export_options,
        "Writes -o FILE.json (gzip'd when it ends in .gz): GPU streams, CPU threads with their CUDA API calls and "
        "NVTX / record_function ranges, an arrow from each launch to its GPU op, counters of queued GPU ops and "
        "(when the trace recorded it) memory; each GPU op carries kview's direction, layer, op and category in its "
        "args. Times are µs from the trace's start; kview opens the file again as a torch.profiler trace.",
    ),
    Command(
        "memory",
        "the CUDA allocator's memory over time: plot, peak, what was live at the peak, largest allocations",
        cmd_memory,
        _memory_options,
        "FILE is a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, kview capture --memory, "
        "kview bench --memory-snapshot; .gz/.xz too) or a trace with TRACE.memory.pickle beside it; a trace "
        "without one shows its own memory events (torch.profiler profile_memory=True, nsys "
        "--cuda-memory-usage=true), and the summary names the source of every figure. Allocated = "
        "the allocator's blocks in use (torch's memory_allocated; its peak is max_memory_allocated), requested = "
        "the bytes asked for (torch's requested_bytes), reserved = the allocator's segments; the phases come from "
        "the trace beside the snapshot, else from its record_function ranges.",
    ),
    Command(
        "ranks",
        "a distributed run rank by rank: GPU time, exposed communication, collectives, stragglers",
        cmd_run_tables,
        _run_options("ranks"),
        "A distributed run rank by rank. TRACES: one export holding every process, one file per rank, a folder "
        "of them, or a mix.",
    ),
    Command(
        "iterations",
        "per-iteration GPU time of every rank (wall, busy, compute, communication, memory, idle), statistics, outliers",
        cmd_run_tables,
        _run_options("iterations"),
        "Per-iteration GPU time of every rank. TRACES: one export holding every process, one file per rank, a "
        "folder of them, or a mix.",
    ),
    Command(
        "launches",
        "launch cost and delay per kernel and op, queue length and idle time by cause per stream, idle gaps",
        cmd_launches,
        _launches_options,
        "Launch cost = the launch call's duration; launch delay = the op's start minus the call's end (0 when "
        "it started before the call returned); queue length = ops launched onto a stream and not started yet; "
        "idle gaps of a stream split by cause: host (the launch came after the stream went idle), sync (the "
        "launching thread was waiting in a synchronization first), kernel wait (queued, gap under --kernel-wait), "
        "other stream (queued; another stream's op ended in the gap), other.",
    ),
    Command(
        "critical-path",
        "each step's critical path: its length, GPU / CPU / launch time on it, CPU- or GPU-bound, top ops",
        cmd_critical_path,
        _critical_path_options,
        "Walked back from each step's end (step ranges; else the whole trace): a GPU op waited for the op before "
        "it on its stream, another stream's op that ended later, or its launch; before a launch, the launching "
        "thread's time back to a synchronization that waited for the GPU, else the step's start. CPU-bound: CPU "
        "and launch time are more than half of the path.",
    ),
    Command(
        "timeline",
        "the trace's timeline as text: GPU streams, CUDA API and NVTX rows per thread",
        cmd_timeline,
        _timeline_options,
        "Rows as the Nsight Systems GUI lays them out (a row per GPU stream; per CPU thread a CUDA API "
        "row and NVTX rows by depth), one character per time bucket: an op's name where it covers a run "
        "of cells, else a bar of the busy fraction. -f md puts the picture in a code block; -f csv/tsv/json "
        "give the numbers behind it (op time and op count per row and cell).",
    ),
    # Handed over whole to packages outside the core, imported by name only when used.
    Command(
        "capture",
        "profile your program (-- COMMAND) or a built-in workload under nsys or torch.profiler into a trace "
        "(needs torch)",
        cmd_external,
        _handed_over,
        shared=False,
    ),
    Command(
        "bench",
        "time forward/backward/train steps of a built-in workload (needs torch)",
        cmd_external,
        _handed_over,
        shared=False,
    ),
]
BY_NAME = {c.name: c for c in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kview",
        description="Terminal explorer for GPU traces.",
        epilog="kview [TRACE ...] opens the explorer (no argument: the bundled sample trace).",
        parents=[_trace_flags(True), _document_flags(True)],
    )
    parser.add_argument("--version", action="version", version=f"kview {__version__}")
    # a stand-in per command that argparse holds as that command's parser, built when first used
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)  # type: ignore[type-var]
    for c in COMMANDS:
        sub.add_parser(c.name, help=c.help, command=c)
    return parser


class _CommandParser:
    """One command's parser, built the first time argparse uses it: `kview --help` lists the
    commands from their help lines and builds none of them, `kview stats ...` builds stats's
    alone (building all eighteen was a third of `kview --help`'s time after the imports)."""

    def __init__(self, *, command: Command, **kwargs):
        self._command = command
        self._kwargs = kwargs  # what argparse's add_parser passes on (prog)
        self._parser: argparse.ArgumentParser | None = None

    def __getattr__(self, name: str):
        return getattr(self.parser, name)

    @property
    def parser(self) -> argparse.ArgumentParser:
        if self._parser is None:
            c = self._command
            p = argparse.ArgumentParser(
                description=c.description or c.help,
                parents=[_trace_flags(False), _document_flags(False)] if c.shared else [],
                add_help=c.shared,  # capture and bench answer --help themselves
                **self._kwargs,
            )
            c.options(p)
            p.set_defaults(cmd=c)
            _SUBPARSERS[c.name] = self._parser = p
        return self._parser


def _tui_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kview",
        usage="kview [--no-cache] [--max-memory SIZE] [--cluster ADDRESS [--cache-dir DIR]] [TRACE ...]",
        description="The explorer over one or more traces (no argument: the bundled sample trace).",
        parents=[_trace_flags(True)],
    )
    parser.add_argument("traces", nargs="*", metavar="TRACE")
    _cluster_options(parser)
    return parser


def _command_name(argv: list[str]) -> str | None:
    """The command this line names (the first word that is no shared flag nor its value), or
    None for the explorer."""
    pre = argparse.ArgumentParser(
        add_help=False, exit_on_error=False, parents=[_trace_flags(True), _document_flags(True)]
    )
    try:
        _, rest = pre.parse_known_args(argv)
    except argparse.ArgumentError:  # a shared flag's bad value: the full parser says so
        return ""
    words = [w for w in rest if not w.startswith("-")]
    return words[0] if words and words[0] in BY_NAME else None


def _misspelt_command(argv: list[str]) -> str | None:
    """The error line for `kview kernal T`: a first word that is no file, no trace name, but
    close to a command's name, is a command mistyped rather than a trace that is missing."""
    import difflib

    words = [w for w in argv if not w.startswith("-")]
    if not words or len(words) < 2 and not words[0].isalpha():
        return None
    word = words[0]
    if os.path.lexists(word) or "/" in word or "." in word:
        return None
    close = difflib.get_close_matches(word, list(BY_NAME), n=1, cutoff=0.6)
    if not close:
        return None
    return f"kview: {word!r} is no command and no file (did you mean `kview {close[0]}`? `kview --help` lists the commands)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for an option it does not know (`--fliter`: did you mean
    `--filter`?), on one line."""

    def parse_args(self, args=None, namespace=None):
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            import difflib

            cmd = getattr(ns, "cmd", None)
            known = _option_strings(self) + (_option_strings(_SUBPARSERS[cmd.name]) if cmd else [])
            flag = next((e.split("=", 1)[0] for e in extra if e.startswith("-")), None)
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6) if flag else []
            where = f"kview {cmd.name}" if cmd else "kview"
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.exit(2, f"{where}: unknown argument {' '.join(extra)!r}{hint}; `{where} --help` lists them\n")
        return ns


_SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def run_tui(args: argparse.Namespace) -> int:
    """`kview [TRACE ...]`: validate every trace, then start the TUI."""
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.trace import Trace, bundled_sample, open_trace

    paths = list(args.traces)
    note = None
    cluster = None
    try:
        if args.cache_dir is not None and args.cluster is None:
            raise UsageError("goes with --cluster (the folder its workers write into)", what="--cache-dir")
        if args.cluster is not None:  # the run's Ranks and Compare of ranks from summaries made on the cluster
            cluster = (args.cluster, _cluster_cache_dir(args))
    except UsageError as e:
        print(e.line(), file=sys.stderr)
        return 2
    if not paths:
        sample = bundled_sample()
        if sample is None:
            print("kview: no trace given and no bundled sample found (kview TRACE.sqlite)", file=sys.stderr)
            return 2
        paths = [str(sample)]
        note = f"No trace given: showing the bundled sample {sample.name} (LM small, one training step on an H200)."
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.ranks import trace_paths

    try:  # a folder of per-rank traces opens as its traces (`kview run/`)
        paths = [str(p) for p in trace_paths(paths)]
    except TraceError as e:
        print(visible_lines(f"kview: {shown(e.path)}: {e.problem}"), file=sys.stderr)
        return 2
    # deferred: polars and what this command uses load only when it runs (`kview --help` loads neither)
    from kview.analysis.memory_timeline import Snapshot, open_snapshot
    from kview.io.snapshot_pickle import is_snapshot_file

    traces: list[Trace | Snapshot] = []
    for p in paths:  # opened and checked once, here: the explorer's loader receives them
        try:  # a memory snapshot opens in the Memory view
            traces.append(open_snapshot(p) if is_snapshot_file(p) else open_trace(p, use_cache=not args.no_cache))
        except TraceError as e:
            print(visible_lines(f"kview: {shown(p)}: {e.problem}"), file=sys.stderr)
            return 2
    try:  # by name, when asked for: textual loads only for the explorer
        tui = importlib.import_module("kview.tui.app")
    except ImportError as e:
        print(f"kview: the terminal UI cannot start ({e}); reinstall kview (pip install kview)", file=sys.stderr)
        return 2
    return tui.run(paths, use_cache=not args.no_cache, note=note, traces=traces, cluster=cluster)


def _set_max_memory(size: str | None) -> None:
    try:
        memory_budget.set_limit(size)
    except ValueError as e:
        raise UsageError(str(e), what="--max-memory") from None


def _exit_on_signal(signum, _frame) -> None:
    """Ctrl-C or SIGTERM during a subcommand: remove half-written temporaries and leave at
    once, without the interpreter's teardown (no traceback from threads being joined)."""

    atomic_write.remove_pending()
    os._exit(128 + signum)


def _error_line(args, e: KviewError) -> str:
    # a trace as the user typed it (relative, say), when the error is about that trace
    given = getattr(args, "trace", None)
    if isinstance(e, TraceError) and given and named(given).absolute() == Path(e.path).absolute():
        return f"kview: {shown(given)}: {e.problem}"
    return e.line()


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except MemoryError:  # before a command's own handling (parsing, the first imports): still one line
        try:
            OutOfMemory().say()
        except MemoryError:
            os.write(2, b"kview: out of memory\n")
        return 2


def _main(argv: list[str] | None) -> int:
    supervise = argv is None  # not capture and bench: their programs' output is the user's, as it comes
    if argv is None:  # the program itself, not a caller in-process (tests)
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_on_signal)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in BY_NAME and not BY_NAME[argv[0]].shared:
        # capture and bench: their own parsers take every argument, --help included
        argv = [argv[0], "--", *argv[1:]] if argv[1:2] != ["--"] else argv
        name: str | None = argv[0]
        supervise = False
    elif any(a in ("-h", "--help", "--version") for a in argv[:1]):
        name = ""
        supervise = False  # argparse alone answers, before anything that could abort runs
    else:
        name = _command_name(argv)
    if supervise or name is None:  # not in a program capture or bench runs: its threads are its own
        no_library_threads_under_a_limit()  # before polars loads, in the explorer as in a command
    if name is None:  # the explorer: its errors are shown in it, or are tracebacks of kview's bugs
        typo = _misspelt_command(argv)
        if typo:
            print(typo, file=sys.stderr)
            return 2
        args = _tui_parser().parse_args(argv)
        try:
            _set_max_memory(args.max_memory)
        except UsageError as e:
            print(e.line(), file=sys.stderr)
            return 2
        return run_tui(args)
    if supervise:  # the program itself: what Python cannot catch (a Rust abort, a kill) said in one line
        from kview.supervisor import run_supervised

        code = run_supervised(str(name or "kview"))
        if code is not None:
            return code

    stderr = sys.stderr
    sys.stderr = VisibleText(stderr)  # file names and trace text in messages: no control characters
    try:
        return _command(argv)
    finally:
        sys.stderr = stderr


def _command(argv: list[str]) -> int:
    """A command (not the explorer): its document on stdout or -o, every failure one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "output", None) == "":
        print(UsageError("-o needs a file name (-o - is stdout)").line(), file=sys.stderr)
        return 2
    if getattr(args, "output", None) == "-":  # stdout, as the document goes without -o
        args.output = None
    _resolve_format(args)
    table = getattr(args, "format", None) == "table"
    if table:  # a file is read whole, never wrapped: its table is not fitted
        from kview.output.table_text import set_table_width

        set_table_width(0 if getattr(args, "output", None) else None)

    stdout = sys.stdout
    guard = StdoutGuard(stdout)
    sys.stdout = guard
    try:
        if getattr(args, "max_memory", None) is not None:
            _set_max_memory(args.max_memory)
        if args.cmd.shared and args.cmd.one_document:
            _check_output(args)
        code = args.cmd.run(args)
        guard.flush()
        return code
    except KviewError as e:  # the side that failed: input trace, output file, command line
        print(_error_line(args, e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:
        if guard.failed is not None or isinstance(e, BrokenPipeError):  # stdout's failure, not kview's
            guard.silence()
            if isinstance(guard.failed or e, BrokenPipeError):  # `kview stats ... | head`: the reader has enough
                return 0
            print(guard.line(), file=sys.stderr)
            return 2
        if is_out_of_memory(e):  # an allocation failed: memory, never the input's fault
            OutOfMemory(type(e).__name__ if not isinstance(e, MemoryError) else "").say()
            return 2
        # kview's own bug: the readers turn damage inside a trace into TraceError (pyo3 panics
        # of the Arrow readers included), so what arrives here is not the file's
        if debugging():
            raise
        print(internal_error_line(args.command, e), file=sys.stderr)
        return 1
    finally:
        # the budget and the table width were this command's: main() may run more in this process
        memory_budget.set_limit(None)
        if table:
            set_table_width(None)
        if sys.stdout is guard:
            sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
