"""A distributed run: `kview ranks`, `kview iterations` and the explorer's Ranks view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis.collectives import collectives_by_rank, straggler_instances, stragglers
from kview.analysis.critical_path import iterations_bound_by
from kview.analysis.iterations import iteration_stats
from kview.analysis.rank_summary import BAR_TITLE, rank_summary, with_time_bar
from kview.analysis.ranks import lone_run, make_run, named_by_file, rank_table
from kview.derived import derived, frames
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.analysis.rank_files import SummarizedRun
    from kview.analysis.ranks import Run
    from kview.trace import Trace

TITLES = {
    "ranks": {
        "ranks": "Ranks",
        "time": "GPU time by rank",
        "collectives": "Collectives",
        "stragglers": "Stragglers by iteration",
        "waits": "Waiting in each collective",
    },
    "iterations": {"iterations": "Iterations", "statistics": "Statistics across iterations"},
}
# the GPU time by rank as a terminal shows it: where each rank's wall time went, at a glance, in 80 columns
TIME_SHOWN = ("Rank", "Wall (ns)", "Busy (% of wall)", "Exposed comm (ns)", "Exposed (% of comm)", "Waited (ns)")


def run_tables(run: Run, command: str) -> dict[str, pl.DataFrame]:
    """The tables of `kview ranks` or `kview iterations` of a run of open traces."""
    if command == "iterations":
        return {"iterations": iterations_bound_by(run), "statistics": iteration_stats(run)}

    return {
        "ranks": rank_table(run),
        "time": rank_summary(run),
        "collectives": collectives_by_rank(run),
        "stragglers": stragglers(run),
        "waits": straggler_instances(run),
    }


def run_document(command: str, tables: dict[str, pl.DataFrame], names: list[str], notes: list[str]) -> Document:
    """The document of `kview ranks` or `kview iterations` from its tables; `names`: the run's
    files, `notes`: what the run's numbering says (and that there is no GPU work)."""

    sections = []
    for name, title in TITLES[command].items():
        frame = tables[name]
        terminal = None
        if name == "time" and frame.height:
            terminal = with_time_bar(frame).select(*TIME_SHOWN, BAR_TITLE)
        sections.append(Section(name, title, frame, terminal=terminal))
    return Document(
        command.capitalize(),
        tuple(sections),
        notes=tuple(notes),
        command=f"kview {command} " + " ".join(names),
        empty="(none)\n",
        written_empty=("json",),  # `--table NAME` without rows: nothing for a person, `[]` for a program
    )


def of_run(run: Run, command: str) -> Document:
    """`kview ranks` or `kview iterations` of a run of open traces."""
    names = [t.name for t in run.traces]
    return run_document(command, run_tables(run, command), names, [*run.notes, *no_ranks(run.ranks, names)])


def of_traces(traces: list[Trace], command: str) -> Document:
    """`kview ranks` or `kview iterations` of open traces: one trace's tables are kept in its
    frame cache (a second look reads them instead of walking every step's critical path)."""
    if len(traces) != 1:
        return of_run(make_run(traces), command)
    *kept, notes, ranks = (_kept_ranks if command == "ranks" else _kept_iterations)(traces[0])
    tables = dict(zip(TITLES[command], kept))
    names = [traces[0].name]
    if "Trace" in tables.get("ranks", pl.DataFrame()).columns:  # the name it is opened under (a link's)
        tables["ranks"] = tables["ranks"].with_columns(pl.lit(names[0], dtype=pl.String).alias("Trace"))
    return run_document(command, tables, names, [*notes["note"].to_list(), *no_ranks(ranks["rank"].to_list(), names)])


def _kept(trace: Trace, command: str) -> tuple[pl.DataFrame, ...]:
    """The tables of a run of `trace` alone, its notes and its units' ranks and their sources
    (what the document adds to them names the file, so a name of the same file given another
    way is not kept in them: the ranks table's Trace is set when it is read)."""
    run = lone_run(trace)
    return (
        *run_tables(run, command).values(),
        pl.DataFrame({"note": run.notes}, schema={"note": pl.String}),
        run.units.select("rank", "source"),
    )


def _not_named_by_file(kept: tuple[pl.DataFrame, ...]) -> bool:
    return not named_by_file(kept[-1])


@derived(
    key="documents.ranks",
    version="2",
    persist=True,
    codec=frames(*TITLES["ranks"], "run_notes", "run_ranks"),
    keep=_not_named_by_file,
)
def _kept_ranks(trace: Trace) -> tuple[pl.DataFrame, ...]:
    return _kept(trace, "ranks")


@derived(
    key="documents.iterations",
    version="2",
    persist=True,
    codec=frames(*TITLES["iterations"], "run_notes", "run_ranks"),
    keep=_not_named_by_file,
)
def _kept_iterations(trace: Trace) -> tuple[pl.DataFrame, ...]:
    return _kept(trace, "iterations")


def summarized(run: SummarizedRun, command: str) -> Document:
    """`kview ranks --cluster` or `kview iterations --cluster`: from each rank file's summary."""
    from pathlib import Path

    names = [Path(f).name for f in run.files]
    return run_document(command, run.tables_of(command), names, [*run.notes, *no_ranks(run.ranks, names)])


def no_ranks(ranks: list[int], names: list[str]) -> list[str]:
    return [] if ranks else ["no GPU work in " + ", ".join(names) + ": no ranks to show"]
