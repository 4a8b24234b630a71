"""Ranks: every trace on the command line (or in a folder) as one distributed run: a bar per
rank (compute, exposed communication, memory, idle over its iterations) with its busy and
exposed shares and the time it waited in collectives, above the iterations of every rank, which
`t` swaps for the stragglers by iteration and the collectives: the tables of `kview ranks` and
`kview iterations` over the same files."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rich.text import Text
from textual import work
from textual.reactive import var
from textual.widgets import Static

from kview.analysis.rank_summary import BAR_TITLE
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import no_ranks, nothing_ranked, on_cluster, ranks, summarized_ranks
from kview.tui.messages import RanksReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable

BAR_COLOURS = {BAR_TITLE: {"█": "green", "▓": "red", "▒": "yellow", "░": "grey50"}}
# the lower table: (document, section) of each, `t` cycles them
LOWER = {
    "iterations": ("iterations", "iterations"),
    "stragglers": ("ranks", "stragglers"),
    "collectives": ("ranks", "collectives"),
}
SHOWN_RANKS = 8  # rows of the ranks table before it scrolls (8 ranks and the lower table fit 80x24)


class RanksView(View):
    view_id = "ranks"
    title = "Ranks"
    key = "7"
    BINDINGS = bindings(VIEW_KEYS["ranks"])
    every_trace = True

    data: var[RanksReady | None] = var(None, init=False)
    lower: var[str] = var("iterations", init=False)

    # -- the tables, made in the view's own thread workers ------------------------------------
    def session_started(self) -> None:
        s = self.session
        if not s.run_in_processes:
            return
        members = s.run_members()
        if s.cluster is not None:
            self.show_stage(f"summarizing the {len(members)} rank files on the cluster")
            self.summarize_run(members)
        else:
            self.show_stage(f"reading the {len(members)} traces of the run in worker processes")
            self.read_run(members)

    def all_traces_in(self) -> None:
        s = self.session
        if not s.loaded and s.snapshots:
            note = "Memory snapshots only: open a run's traces to see its ranks (kview rank0.sqlite rank1.sqlite)."
            self.post_message(nothing_ranked(note))
        elif s.loaded and not s.run_in_processes:
            self.show_stage("ranks")
            self.rank_run()

    @work(thread=True, exit_on_error=False)
    def rank_run(self) -> None:
        loaded = self.session.loaded
        try:
            message = ranks([loaded[i] for i in sorted(loaded)])
        except Exception as e:  # a table that cannot be made must not end the session
            message = no_ranks(e)
        self.post_message(message)

    @work(thread=True, exit_on_error=False)
    def read_run(self, members: list[int]) -> None:
        """The Ranks view of a large run, as `kview ranks` makes it: each trace read into the
        frame cache by a worker process, then the ranks made here from the cache (traces of
        their own: the views' loads use theirs at the same time), without loading every view
        of every trace."""
        # deferred: a large run's readers (worker processes) load only for such a run
        from kview.analysis.ranks import read_in_workers
        from kview.trace import open_trace

        try:
            files = [Path(self.session.paths[i]) for i in members]
            for n in read_in_workers(files, quiet=True):
                self.app.call_from_thread(
                    self.show_stage, f"reading the run's traces in worker processes: {n} of {len(files)}"
                )
            self.app.call_from_thread(self.show_stage, "ranks")
            message = ranks([open_trace(f) for f in files])
        except Exception as e:  # a table that cannot be made must not end the session
            message = no_ranks(e)
        self.post_message(message)

    @work(thread=True, exit_on_error=False)
    def summarize_run(self, members: list[int]) -> None:
        """The Ranks view of a run summarized on a cluster, as `kview ranks --cluster` makes it."""
        try:
            run = on_cluster(self, members, None, "summarizing the rank files on the cluster")
            self.session.summarized = run
            message = summarized_ranks(run)
        except Exception as e:  # a table that cannot be made must not end the session
            message = no_ranks(e)
        self.post_message(message)

    def on_ranks_ready(self, m: RanksReady) -> None:
        self.data = m

    def watch_data(self, m: RanksReady) -> None:
        if not self.has_ranks():
            self.show(Static(m.caption, id="ranks-caption"))
            return
        caption = Static(Text(m.caption, style="bold"), id="ranks-caption")
        # the GPU time by rank as `kview ranks` prints it in a terminal, with its bar
        time = m.ranks.section("time").frame_for("table")
        self.ranks_table = FrameTable(time, id="ranks-table", bar_colours=BAR_COLOURS, narrow=("Wall (ns)",))
        self.ranks_table.styles.height = min(time.height, SHOWN_RANKS) + 2  # header, rows, a scrollbar
        self.lower_title = Static("", id="ranks-lower-title")
        self.table = FrameTable(id="ranks-lower", narrow=("Overlapped comm (ns)", "Memory (ns)", "Step"))
        self.show(caption, self.ranks_table, self.lower_title, self.table)
        self.render_lower()
        self.focus_if_active(self.ranks_table)

    def has_ranks(self) -> bool:
        return self.data is not None and self.data.ranks.has("time") and self.data.ranks.frame("time").height > 0

    def watch_lower(self) -> None:
        if self.has_ranks():
            self.render_lower()

    def render_lower(self) -> None:
        assert self.data is not None
        doc, name = LOWER[self.lower]
        section = getattr(self.data, doc).section(name)
        self.table.set_frame(section.frame)
        names = list(LOWER)
        following = names[(names.index(self.lower) + 1) % len(names)]
        self.lower_title.update(Text(f"{section.title} · t: {following}", style="bold"))

    def action_cycle_table(self) -> None:
        names = list(LOWER)
        self.lower = names[(names.index(self.lower) + 1) % len(names)]

    def focused_table(self) -> FrameTable:
        return self.ranks_table if self.ranks_table.has_focus else self.table

    def action_sort(self, descending: bool) -> None:
        if self.has_ranks():
            self.focused_table().sort_by_cursor(descending)

    def shown(self) -> Shown:
        """The focused table: the ranks (with their bar) or the lower table."""
        if not self.has_ranks():
            return Shown(pl.DataFrame(), "ranks")
        if self.focused_table() is self.ranks_table:
            return Shown(self.ranks_table.shown(), "ranks", (BAR_TITLE,))
        return Shown(self.table.shown(), f"ranks {self.lower}")
