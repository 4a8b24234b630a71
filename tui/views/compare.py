"""Compare: several traces, or the phases of one trace, side by side by range, layer, category
or kernel, GPU or CPU time: the table `kview compare` prints (the caption gives its command);
`g` the regression gate of the last trace against the first (`kview diff A B --gate 5`)."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual import work
from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import BY, compare, on_cluster, summarized_compare
from kview.tui.messages import CompareReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable


class CompareView(View):
    view_id = "compare"
    title = "Compare"
    BINDINGS = bindings(VIEW_KEYS["compare"])
    every_trace = True

    data: var[CompareReady | None] = var(None, init=False)
    wanted: tuple[str, str, bool] | None = None  # (by, metric, ranks) last asked for with b / m / r
    pending = False  # Compare of the ranks asked of the cluster

    # -- the table, made in the view's own thread workers ------------------------------------
    def all_traces_in(self) -> None:
        s = self.session
        if not s.loaded and s.snapshots:
            note = "Memory snapshots only: open traces to compare them (kview A.sqlite B.sqlite)."
            self.post_message(CompareReady(None, note))
        elif s.loaded:  # (a first trace that failed ended the app)
            self.show_stage("comparing")
            self.compare_traces()

    def came_forward(self) -> None:
        s = self.session
        if s.cluster is not None and s.run_in_processes:
            if self.data is None and not self.pending:
                self.pending = True  # once: the view keeps what it shows, keys ask again
                self.show_stage("comparing the ranks")
                self.compare_summarized()
        elif not s.started.issuperset(range(len(s.paths))):
            # a large run's traces load when shown; Compare needs every one
            self.show_stage(f"loading the {len(s.paths)} traces to compare them")
            for i in range(len(s.paths)):
                s.start_load(i)

    @work(thread=True, exit_on_error=False)
    def compare_traces(self, by: str | None = None, metric: str = "gpu", ranks: bool | None = None) -> None:
        loaded = self.session.loaded
        try:
            message = compare([loaded[i] for i in sorted(loaded)], by, metric, ranks)
        except Exception as e:  # a table that cannot be made must not end the session
            message = CompareReady(None, f"cannot compare: {type(e).__name__}: {e}".splitlines()[0])
        self.post_message(message)

    @work(thread=True, exit_on_error=False, group="cluster-compare", exclusive=True)
    def compare_summarized(self, by: str = "category", metric: str = "gpu") -> None:
        """Compare of the ranks from each rank file's columns, made on the cluster."""
        s = self.session
        assert s.cluster is not None
        try:
            stage = "making each rank's column on the cluster"
            run = on_cluster(self, s.run_members(), (by, metric, None), stage)
            message = summarized_compare(run, by, metric, s.cluster[0])
        except Exception as e:  # a table that cannot be made must not end the session
            message = CompareReady(None, f"cannot compare: {type(e).__name__}: {e}".splitlines()[0], by, metric, True)
        self.post_message(message)

    def compare_again(self, by: str, metric: str, ranks: bool) -> None:
        s = self.session
        if s.cluster is not None and s.run_in_processes:
            if ranks:  # from the summaries, without loading every trace
                self.show_stage("comparing the ranks")
                self.compare_summarized(by, metric)
                return
            if not s.started.issuperset(range(len(s.paths))):  # the traces as columns need them all
                self.show_stage(f"loading the {len(s.paths)} traces to compare them")
                for i in range(len(s.paths)):
                    s.start_load(i)
                return
        if s.loaded:
            self.compare_traces(by, metric, ranks)

    def on_compare_ready(self, m: CompareReady) -> None:
        if self.wanted is None or (m.by, m.metric, m.ranks) == self.wanted:  # an older request's table is dropped
            self.data = m

    def watch_data(self, m: CompareReady) -> None:
        if m.frame is None:  # nothing to compare: the caption says why
            self.table = None
            self.show(Static(m.caption, id="compare-caption"))
            return
        table = getattr(self, "table", None)
        if table is not None and table.is_mounted:
            # b / m: the same widgets take the new table, so the keys stay with it
            self.query_one("#compare-caption", Static).update(Text(m.caption, style="bold"))
            table.set_frame(m.frame)
            return
        self.table = FrameTable(m.frame, id="compare-table")
        self.show(Static(Text(m.caption, style="bold"), id="compare-caption"), self.table)
        self.focus_if_active(self.table)

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and self.data.frame is not None and self.table is not None:
            self.table.sort_by_cursor(descending)

    def current(self) -> tuple[str, str, bool] | None:
        """(by, metric, ranks) shown, or being made after b / m / r (keys pressed in a row add up)."""
        return self.wanted or ((self.data.by, self.data.metric, self.data.ranks) if self.data is not None else None)

    def action_cycle_by(self) -> None:
        if (now := self.current()) is None:
            return
        by = BY[(BY.index(now[0]) + 1) % len(BY)] if now[0] in BY else BY[0]
        self.again(by, now[1] if by == "range" else "gpu", now[2])

    def action_cycle_metric(self) -> None:
        if (now := self.current()) is None:
            return
        if now[0] != "range":
            self.app.notify("CPU time is a range's (b: by range first)", severity="warning", timeout=4)
            return
        self.again("range", "cpu" if now[1] == "gpu" else "gpu", now[2])

    def action_toggle_ranks(self) -> None:
        if (now := self.current()) is None:
            return
        self.again(now[0], now[1], not now[2])

    def action_toggle_gate(self) -> None:
        if (now := self.current()) is None:
            return
        self.again("range" if now[0] == "gate" else "gate", "gpu", False)

    def again(self, by: str, metric: str, ranks: bool) -> None:
        self.wanted = (by, metric, ranks)
        self.show_stage(f"comparing by {by}")
        self.compare_again(by, metric, ranks)
        columns = "ranks" if ranks else "traces"
        what = "the regression gate" if by == "gate" else f"compare {columns} by {by}, {metric.upper()} time"
        self.app.notify(what, timeout=2)

    def shown(self) -> Shown:
        if self.data is None or self.data.frame is None or self.table is None:
            return Shown(pl.DataFrame(), "compare")
        if self.data.by == "gate":
            return Shown(self.table.shown(), "gate")
        what = f"compare {'ranks ' if self.data.ranks else ''}by {self.data.by}"
        return Shown(self.table.shown(), what + ("" if self.data.metric == "gpu" else " cpu"))
