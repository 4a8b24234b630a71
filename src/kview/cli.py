"""The `kview` command line. Subcommands never import Textual or torch.

`kview TRACE` (no subcommand) hands over to the TUI, and `kview capture` to the capture
package; both are imported by module name only when asked for, so the core keeps its
one-way dependencies and `kview stats` starts fast on a box without them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from kview.errors import KviewError, TraceError, UsageError, debugging, internal_error_line, shown


def _parser_stats(sub) -> None:
    from kview.output.render import FORMATS

    p = sub.add_parser(
        "stats",
        help="nsys-compatible summary reports (same numbers as `nsys stats`)",
        description="Reports identical to `nsys stats --format csv`, without nsys.",
    )
    p.add_argument("trace", help="Nsight Systems .sqlite export")
    p.add_argument(
        "-r",
        "--report",
        default=None,
        help="comma-separated report names (default: nsys's default set); 'all' for every report",
    )
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PREFIX",
        help="write one file per report, PREFIX_<report>.<ext>, instead of stdout (never over an "
        "existing file unless --force, never over the trace)",
    )
    p.add_argument("--force", action="store_true", help="with -o: overwrite existing output files")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the frame cache")


def _parser_analyses(sub) -> None:
    from kview.output.render import FORMATS

    p = sub.add_parser(
        "kernels",
        help="one row per GPU kernel: direction, layer, op, shapes, category, FLOPs",
        description="Per-kernel attribution table. Filter language: bare words match kernel "
        "names; dir:, layer:, op:, cat:, range:, stream:, device:, kernel:; dur>50us, "
        "grid>1024; a leading - negates; terms AND together.",
    )
    p.add_argument("trace")
    p.add_argument("--filter", default="", help='e.g. "dir:bprop layer:Enc_0 gemm dur>10us"')
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")
    p = sub.add_parser("layers", help="GPU time per repeated layer (forward/backward, sublayers)")
    p.add_argument("trace")
    p.add_argument("--pattern", default=None, help="regex for layer range names (default: detected, e.g. ^layer_\\d+$)")
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")
    p = sub.add_parser("overview", help="trace facts, GPU busy share, idle gaps, time by category and phase, findings")
    p.add_argument("trace")
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")
    p = sub.add_parser("phases", help="GPU time per phase (forward_pass, backward_pass, optimizer_step, ...)")
    p.add_argument("trace")
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")


def _parser_compare(sub) -> None:
    from kview.output.render import FORMATS

    p = sub.add_parser(
        "compare",
        help="traces side by side, or phases within one trace",
        description="Rows are ranges (or categories, kernels, layers), one column per trace "
        "(or per --ranges phase), then the difference of each later column to the first.",
    )
    p.add_argument("traces", nargs="+")
    p.add_argument("--root", default=None, help="restrict each trace to its last instance of this range")
    p.add_argument("--metric", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--by", default="range", choices=["range", "category", "kernel", "layer"])
    p.add_argument("--ranges", default=None, help="one trace: put these ranges side by side (comma list)")
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")
    p = sub.add_parser("diff", help="what changed between two runs (kernels, counts, phases)")
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("-f", "--format", default="table", choices=FORMATS)
    p.add_argument("--no-cache", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    from kview import __version__

    parser = argparse.ArgumentParser(
        prog="kview",
        description="Terminal explorer for GPU traces.",
        epilog="kview [TRACE ...] opens the explorer (no argument: the bundled sample trace).",
    )
    parser.add_argument("--version", action="version", version=f"kview {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _parser_stats(sub)
    _parser_analyses(sub)
    _parser_compare(sub)
    for name in ("stats", "kernels", "layers", "overview", "phases", "compare", "diff"):
        sub.choices[name].add_argument(
            "--max-memory",
            default=None,
            metavar="SIZE",
            help="memory a JSON trace may take while it is decoded (e.g. 8G; default: KVIEW_MAX_MEMORY, else the "
            "memory available); a larger .json or .json.gz is refused",
        )
    # Handed over whole to packages outside the core, imported by name only when used.
    for name, help_ in (
        (
            "capture",
            "profile your program (-- COMMAND) or a built-in workload under nsys or "
            "torch.profiler into a trace (needs torch)",
        ),
        ("bench", "time forward/backward/train steps of a built-in workload (needs torch)"),
    ):
        sp = sub.add_parser(name, help=help_, add_help=False)
        sp.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _report_names(arg: str | None) -> list[str]:
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
    from kview.output.render import MULTI_TABLE_FORMATS

    if fmt not in MULTI_TABLE_FORMATS:
        raise UsageError(f"{what} do not fit one {fmt.upper()} document on stdout: {hint}")


def cmd_stats(args) -> int:
    from kview.output import render
    from kview.reports import REPORTS
    from kview.trace import open_trace

    names = _report_names(args.report)
    if args.output:
        from kview.output import files

        ext = render.EXTENSIONS[args.format]
        targets = {n: Path(f"{args.output}_{n}.{ext}") for n in names}
        files.check(list(targets.values()), [args.trace], args.force)  # refused before the work
    elif len(names) > 1:
        _one_table_per_document(
            args.format,
            f"{len(names)} reports",
            "write one file per report with -o PREFIX, pick one with -r NAME, "
            "or use -f json (one object keyed by report name)",
        )
    trace = open_trace(args.trace, use_cache=not args.no_cache)
    reports = [REPORTS[n](trace) for n in names]  # all computed before anything is written

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
        if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
            from kview.analysis.cpu_ops import holdings

            if holdings(trace)["CPU ops"]:
                parts.append(f"no GPU kernels; `kview kernels {args.trace}` summarizes the CPU op times")
        if parts:
            _note(trace, "; ".join(parts))

    if args.output:
        texts = {
            targets[r.name]: render.render(r.frame, args.format, r.decimals)
            for r in reports
            if not (r.skipped or r.empty)
        }
        files.write(texts, [args.trace], args.force)
        for path in texts:
            print(f"wrote {path}", file=sys.stderr)
        remark()
        return 0
    out = sys.stdout
    if args.format == "table":  # for a person: every report under its nsys title
        for i, r in enumerate(reports):
            if i:
                out.write("\n")
            out.write(f"** {r.title} ({r.name}):\n\n")
            if r.skipped:
                out.write(f"SKIPPED: {trace.name} {r.skipped}.\n")
            elif r.empty:
                out.write("(no rows)\n")
            else:
                out.write(render.render(r.frame, args.format, r.decimals))
        remark(table=True)
        return 0
    remark()
    if len(reports) == 1:  # exactly that document, nothing around it
        r = reports[0]
        out.write(
            render.render(r.frame, args.format, r.decimals)
            if not (r.skipped or r.empty)
            else render.render(r.frame, args.format)
            if args.format == "json"
            else ""
        )
        return 0
    if args.format == "json":
        out.write(json.dumps({r.name: r.frame.to_dicts() for r in reports}, ensure_ascii=False, indent=1) + "\n")
        return 0
    sections = {f"{r.title} ({r.name})": r.frame for r in reports}
    skipped = {f"{r.title} ({r.name})": f"SKIPPED: {trace.name} {r.skipped}.\n" for r in reports if r.skipped}
    out.write(render.render_sections(sections, args.format, empty="(no rows)\n", texts=skipped))
    return 0


def cmd_kernels(args) -> int:
    from kview.analysis import filters
    from kview.analysis.attribution import attribute, shown
    from kview.output import render
    from kview.trace import open_trace

    try:
        pred = filters.parse(args.filter)
    except filters.FilterError as e:
        raise UsageError(str(e), what="--filter") from None
    trace = open_trace(args.trace, use_cache=not args.no_cache)
    table = attribute(trace)
    if table.height == 0:  # no GPU work: what the trace does hold, its CPU op times
        from kview.analysis.cpu_ops import cpu_op_summary, no_gpu_work_note

        ops = cpu_op_summary(trace)
        _note(trace, no_gpu_work_note(trace) + ("; showing its CPU op times instead" if ops.height else ""))
        sys.stdout.write(render.render(ops, args.format) if ops.height else render.render(shown(table), args.format))
        return 0
    if pred is not None:
        table = table.filter(pred)
    sys.stdout.write(render.render(shown(table), args.format))
    return 0


def _note(trace, text: str) -> None:
    """A remark about the trace on stderr, so stdout stays the document."""
    print(f"kview: {trace.name}: {text}", file=sys.stderr)


def cmd_layers(args) -> int:
    from kview.analysis.layers import layer_times
    from kview.output import render
    from kview.output.format import stacked_bar
    from kview.trace import open_trace

    trace = open_trace(args.trace, use_cache=not args.no_cache)
    df = layer_times(trace, args.pattern)
    if df.height == 0:  # not an error: the trace has no such ranges; the document is empty
        _note(trace, "no repeated layer ranges found (layer_0.., Enc_0..; give --pattern REGEX)")
        sys.stdout.write(render.render(df, args.format) if args.format == "json" else "")
        return 0
    if args.format == "table":
        df = df.with_columns(stacked_bar(["Forward (ns)", "Backward (ns)"]).alias("Forward █ / Backward ▓"))
    sys.stdout.write(render.render(df, args.format))
    return 0


def cmd_overview(args) -> int:
    from kview.analysis.overview import build
    from kview.output import render
    from kview.trace import open_trace

    _one_table_per_document(
        args.format, "the overview's tables", "use -f json (one object keyed by table), md or table"
    )
    o = build(open_trace(args.trace, use_cache=not args.no_cache))
    import polars as pl

    sections = {
        "Trace": pl.DataFrame({"": [k for k, _ in o.facts], "value": [v for _, v in o.facts]}),
        "GPU busy": o.busy,
        "Largest idle gaps": o.gaps,
        "Time by category": o.categories,
        "Time by phase": o.phases,
        "Top kernels": o.top_kernels,
        "Top CPU ops": o.cpu_ops,
        "Findings": pl.DataFrame({"Finding": o.findings}),
    }
    # findings are sentences: bullets in a terminal rather than a truncated table cell
    bullets = {"Findings": "".join(f"- {f}\n" for f in o.findings)} if args.format == "table" else None
    sys.stdout.write(render.render_sections(sections, args.format, texts=bullets))
    return 0


def cmd_phases(args) -> int:
    import polars as pl

    from kview.analysis.layers import phase_times
    from kview.output import render
    from kview.output.format import bar
    from kview.trace import open_trace

    trace = open_trace(args.trace, use_cache=not args.no_cache)
    df = phase_times(trace)
    if df.height == 0:
        _note(trace, "no phase ranges (user NVTX or record_function ranges at the top of a thread)")
    if args.format == "table" and df.height:
        gpu = pl.col("GPU Time (ns)")
        df = df.with_columns(bar(gpu / gpu.max(), width=30).alias("Bar"))
    sys.stdout.write(render.render(df, args.format))
    return 0


def cmd_compare(args) -> int:
    from kview.analysis.compare import distinct_labels, phase_windows, root_window, side_by_side
    from kview.output import render
    from kview.trace import open_trace

    traces = [open_trace(t, use_cache=not args.no_cache) for t in args.traces]
    if args.ranges:
        if len(traces) != 1:
            raise UsageError("--ranges compares phases within one trace; give exactly one trace")
        windows = phase_windows(traces[0], [r for r in args.ranges.split(",") if r], args.root)
    else:
        stems = [t.stem for t in traces]
        # a terminal shows what tells the traces apart; machine formats keep the full names
        labels = distinct_labels(stems) if args.format == "table" else stems
        windows = [root_window(t, args.root, label) for t, label in zip(traces, labels)]
    df = side_by_side(windows, args.by, args.metric)
    sys.stdout.write(render.render(df, args.format))
    return 0


def cmd_diff(args) -> int:
    from kview.analysis.compare import diff
    from kview.output import render
    from kview.trace import open_trace

    _one_table_per_document(args.format, "the diff's tables", "use -f json (one object keyed by table), md or table")
    a = open_trace(args.before, use_cache=not args.no_cache)
    b = open_trace(args.after, use_cache=not args.no_cache)
    sections = diff(a, b, args.top)
    ga, gb = sections["Runs"]["A"][1], sections["Runs"]["B"][1]
    if ga != gb and "?" not in (ga, gb):
        print(f"kview: A ran on {ga}, B on {gb}: kernels and their times differ for that reason too", file=sys.stderr)
    sys.stdout.write(
        render.render_sections(sections, args.format, suffix=f" (A = {a.name}, B = {b.name})", empty="(none)\n")
    )
    return 0


EXTERNAL = {"capture": "kview.capture.cli", "bench": "kview.capture.benchmark"}


def cmd_external(args) -> int:
    try:
        module = importlib.import_module(EXTERNAL[args.command])
    except ImportError as e:
        raise UsageError(
            f"`kview {args.command}` needs the capture extra (pip install 'kview[capture]'): {e}"
        ) from None
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    return module.main(rest)


COMMANDS = {
    "stats": cmd_stats,
    "kernels": cmd_kernels,
    "layers": cmd_layers,
    "phases": cmd_phases,
    "overview": cmd_overview,
    "compare": cmd_compare,
    "diff": cmd_diff,
    "capture": cmd_external,
    "bench": cmd_external,
}


def run_tui(argv: list[str]) -> int:
    """`kview [TRACE ...] [--no-cache] [--max-memory SIZE]`: validate every trace, then start the TUI."""
    from kview.trace import bundled_sample, validate

    use_cache = "--no-cache" not in argv
    paths = []
    rest = iter(argv)
    for a in rest:
        if a == "--max-memory" or a.startswith("--max-memory="):
            size = a.partition("=")[2] if "=" in a else next(rest, "")
            try:
                _set_max_memory(size)
            except UsageError as e:
                print(e.line(), file=sys.stderr)
                return 2
        elif a != "--no-cache":
            paths.append(a)
    note = None
    if not paths:
        sample = bundled_sample()
        if sample is None:
            print("kview: no trace given and no bundled sample found (kview TRACE.sqlite)", file=sys.stderr)
            return 2
        paths = [str(sample)]
        note = f"No trace given: showing the bundled sample {sample.name} (LM small, one training step on an H200)."
    for p in paths:
        try:
            validate(p)
        except TraceError as e:
            print(f"kview: {shown(p)}: {e.problem}", file=sys.stderr)
            return 2
    try:
        tui = importlib.import_module("kview.tui.app")
    except ImportError as e:
        print(f"kview: the terminal UI cannot start ({e}); reinstall kview (pip install kview)", file=sys.stderr)
        return 2
    return tui.run(paths, use_cache=use_cache, note=note)


def _set_max_memory(size: str) -> None:
    from kview.io import memory_budget

    try:
        memory_budget.set_limit(size)
    except ValueError as e:
        raise UsageError(str(e), what="--max-memory") from None


def _exit_on_signal(signum, _frame) -> None:
    """Ctrl-C or SIGTERM during a subcommand: remove half-written temporaries and leave at
    once, without the interpreter's teardown (no traceback from threads being joined)."""
    from kview import atomic_write

    atomic_write.remove_pending()
    os._exit(128 + signum)


def _error_line(args, e: KviewError) -> str:
    # a trace as the user typed it (relative, say), when the error is about that trace
    given = getattr(args, "trace", None)
    if isinstance(e, TraceError) and given and Path(given).expanduser().absolute() == Path(e.path).absolute():
        return f"kview: {shown(given)}: {e.problem}"
    return e.line()


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the program itself, not a caller in-process (tests)
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_on_signal)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["--no-cache"] and argv[1:2] and argv[1] in COMMANDS and argv[1] not in EXTERNAL:
        argv = [argv[1], "--no-cache", *argv[2:]]  # `kview --no-cache stats T` as `kview stats T --no-cache`
    if (
        not argv
        or (argv[0] not in COMMANDS and not argv[0].startswith("-"))
        or argv[0] in ("--no-cache", "--max-memory")
        or argv[0].startswith("--max-memory=")
    ):
        return run_tui(argv)
    if argv[0] in EXTERNAL:  # their own parsers take every argument, --help included
        argv = [argv[0], "--", *argv[1:]] if argv[1:2] != ["--"] else argv
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "max_memory", None) is not None:
            _set_max_memory(args.max_memory)
        return COMMANDS[args.command](args)
    except KviewError as e:  # the side that failed: input trace, output file, command line
        print(_error_line(args, e), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kview stats ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # kview's own bug: the readers turn damage inside a trace into
        # TraceError (pyo3 panics of the Arrow readers included), so what arrives here is not the file's
        if debugging():
            raise
        print(internal_error_line(args.command, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
