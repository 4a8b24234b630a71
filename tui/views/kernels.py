"""Kernels: the kernel summary (exactly `cuda_gpu_kern_sum`), regrouped, filtered, per kernel,
or as the frequency table of one column (VisiData's `F`).

Every table is made in the view's worker (a key only changes the state; the UI thread shows the
table handed back, and one of an older state is dropped), so no key regroups on the UI thread.
A row of the table is read as the state it was made for (`shown_state`): keys that come before
the new table read the table on screen as what it is."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import polars as pl
from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.reactive import var
from textual.widgets import Input, Static

from kview.analysis import filters
from kview.analysis.kernel_groups import STATS, frequency, group_stats
from kview.notation import bar, distinct_short_names, fmt_ns
from kview.output.format import SECONDARY_COLUMNS
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import kernel_context as context_of
from kview.tui.loading import kernels_document
from kview.tui.messages import (
    AttributedKernels,
    ForView,
    KernelSummary,
    OpenKernels,
    Scope,
    ShowOnTimeline,
    frozen_message,
)
from kview.tui.views.base import Shown, View
from kview.tui.widgets.context_screen import ContextScreen
from kview.tui.widgets.filter_input import FilterInput, TermSuggester
from kview.tui.widgets.frame_table import CATEGORY_COLOURS, FrameTable

# (what the status line calls it, the column grouped by)
GROUPINGS = [
    ("name", "Kernel"),
    ("short name", "Short name"),
    ("category", "Category"),
    ("layer", "Layer"),
    ("op", "Op"),
    ("direction", "Direction"),
    ("range", "Range"),
]
# grouping keys the loader derived as columns of the attributed table
DERIVED = {"Short name": "_short", "Range": "_range"}
# columns of the table as shown that stand for a column of the attributed table (F, enter)
SHOWN_AS = {"Name": "Kernel", **DERIVED}
HIDDEN = ("_full", "_grid", "_block", "_key", "_short", "_range", "_name", "_launch")
NARROW = SECONDARY_COLUMNS  # left out below 120 columns, as the CLI table leaves them out first
BARS = ("Share",)


@dataclass(frozen=True)
class KernelsState:
    """What the Kernels view shows; one value, so a key that changes several parts (a group
    switch also leaves the drill-in) refreshes the table once."""

    mode: str = "summary"  # "summary": a row per group; "rows": a row per kernel; "freq"
    grouping: int = 0  # index into GROUPINGS
    filter_text: str = ""
    pick: tuple[str, Any] | None = None  # (column, value) of the group or value drilled into
    scope: Scope | None = None  # only these ops (an NVTX range's), until escape
    before: KernelsState | None = None  # what escape restores (after a jump, a frequency table)
    freq: str | None = None  # the column of the frequency table (mode "freq")


@dataclass(frozen=True)
class KernelsTable:
    """A table the Kernels view shows: the frame, its text columns' widths, the status line."""

    frame: pl.DataFrame
    hints: dict[str, int] | None
    status: str
    state: KernelsState = KernelsState()  # what it was made for


@frozen_message
class Regrouped(Message):
    """The table of state `state`, made by regroup number `n` in the view's worker."""

    n: int
    state: KernelsState
    table: KernelsTable


class KernelsView(View):
    view_id = "kernels"
    title = "Kernels"
    shown_first = True
    document = kernels_document
    BINDINGS = bindings(VIEW_KEYS["kernels"])
    data_vars = ("kern_sum", "attributed")

    kern_sum: var[KernelSummary | None] = var(None, init=False)
    attributed: var[AttributedKernels | None] = var(None, init=False)
    state: var[KernelsState] = var(KernelsState, init=False)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.history: list[str] = []  # filters applied, oldest first (the filter line walks it)
        self.shown_at: float | None = None  # perf_counter() when the first table was built
        self._regroups = 0  # tables asked of the worker: only the last one's is shown
        self.shown_state = KernelsState()  # the state the table on screen was made for
        self._asked: ForView | None = None  # a request that came before the kernels (another trace's)

    # the parts of the state, read-only
    @property
    def mode(self) -> str:
        return self.state.mode

    @property
    def grouping(self) -> int:
        return self.state.grouping

    @property
    def filter_text(self) -> str:
        return self.state.filter_text

    @property
    def pick(self) -> tuple[str, Any] | None:
        return self.state.pick

    # -- data arriving ----------------------------------------------------------------
    def on_kernel_summary(self, m: KernelSummary) -> None:
        self.kern_sum = m

    def on_attributed_kernels(self, m: AttributedKernels) -> None:
        self.attributed = m

    def watch_kern_sum(self) -> None:
        self.table = FrameTable(hidden=HIDDEN, narrow=NARROW, id="kernels-table")
        self.status = Static("", id="kernels-status")
        self.detail = Static("", id="kernels-detail")
        self.finput = FilterInput(
            self.history,
            placeholder="filter: gemm dir:bprop layer:layer_3 dur>50us -cat:memset",
            suggester=self._suggester(),
            id="filter",
        )
        self.ferror = Static("", id="filter-error")
        self.finput.display = self.ferror.display = False
        self.show(self.status, self.table, self.detail, self.ferror, self.finput)
        self.shown_state = KernelsState()
        self.refresh_table()
        self.focus_if_active(self.table)

    def watch_attributed(self) -> None:
        self.finput.suggester = self._suggester()
        self.refresh_table()
        if self._asked is not None and self.attributed is not None:
            asked, self._asked = self._asked, None
            self.request(asked)

    def watch_state(self) -> None:
        if self.kern_sum is not None:
            self.refresh_table()

    def forget_trace(self) -> None:
        """Another trace is about to be shown: keep the grouping and the filter, leave what
        belonged to this trace (a range's ops, a drill-in)."""
        self.set_reactive(KernelsView.state, KernelsState(grouping=self.grouping, filter_text=self.filter_text))
        self._asked = None

    def _suggester(self) -> TermSuggester:
        words = ["dir:fprop", "dir:bprop", "dir:optim"] + [f"cat:{c}" for c in CATEGORY_COLOURS]
        return TermSuggester(words + (list(self.attributed.words) if self.attributed is not None else []))

    # -- the table ----------------------------------------------------------------
    def _rows(
        self, pick: bool = True, state: KernelsState | None = None, columns: tuple[str, ...] = ()
    ) -> pl.DataFrame:
        """The attributed kernels of the scope, filter and (with `pick`) drill-in of `state`
        (the one shown when None); of a large trace's kernels, read from its worker's files,
        only `columns` where named (all of them else)."""
        st = state or self.state
        if self.attributed is None:
            return pl.DataFrame()
        t: pl.DataFrame | pl.LazyFrame = self.attributed.table
        if st.scope is not None:
            t = self._scoped(t, st.scope)
        if st.filter_text:
            pred = filters.parse(st.filter_text)
            t = t if pred is None else t.filter(pred)
        if pick and st.pick:
            col, val = st.pick
            t = (
                t.filter(pl.col(SHOWN_AS.get(col, col)) == val)
                if val is not None
                else t.filter(pl.col(SHOWN_AS.get(col, col)).is_null())
            )
        if isinstance(t, pl.LazyFrame):
            return (t.select(list(dict.fromkeys(columns))) if columns else t).collect()
        return t

    def no_kernels(self) -> bool:
        """True (and the user told so) when the trace has no GPU kernels to summarize."""
        if self.kern_sum is not None and self.kern_sum.note:
            self.app.notify(self.kern_sum.note, severity="warning", timeout=4)
            return True
        return False

    def _scoped(self, table: pl.DataFrame | pl.LazyFrame, scope: Scope) -> pl.DataFrame:
        """The rows of `scope`, kept while the scope stays (each key re-filters only what remains)."""
        cached = getattr(self, "_scope_rows", None)
        if cached is None or cached[0] is not scope or cached[1] is not table:
            rows = table.filter(pl.col("Idx").is_in(scope.idx.implode()))
            cached = (scope, table, rows.collect() if isinstance(rows, pl.LazyFrame) else rows)
            self._scope_rows = cached
        return cached[2]

    def summary(self, state: KernelsState | None = None) -> pl.DataFrame:
        st = state or self.state
        label = GROUPINGS[st.grouping][1]
        if self.attributed is None or (label == "Kernel" and not st.filter_text and st.scope is None):
            assert self.kern_sum is not None  # the table exists once the summary arrived
            k = self.kern_sum.frame  # exactly cuda_gpu_kern_sum
            if k.width == 0:  # the report was skipped: no kernels, the same columns without rows
                return pl.DataFrame(
                    schema={**{c: pl.Float64 for c in STATS}, "Name": pl.String, "Share": pl.String, "_full": pl.String}
                )
            total = k["Total Time (ns)"].sum() or 1
            return k.with_columns(
                bar(pl.col("Total Time (ns)") / total).alias("Share"),
                pl.col("Name").alias("_full"),
                distinct_short_names(k["Name"]).alias("Name"),
            )
        key = DERIVED.get(label, label)
        rows = self._rows(state=st, columns=(key, "Kernel", "Category", "Duration (ns)"))
        if label == "Kernel":
            rows = rows.filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
        g = group_stats(rows, key)
        total = g["Total Time (ns)"].sum() or 1
        shown = self._display_names(g[key]) if label == "Kernel" else g[key]
        return g.with_columns(
            bar(pl.col("Total Time (ns)") / total).alias("Share"),
            pl.col(key).alias("_full"),
            pl.col(key).alias("_key"),
            shown.alias(label),
        ).select(*STATS, label, "Share", *([] if label == "Category" else ["Category"]), "_full", "_key")

    def _display_names(self, kernels: pl.Series) -> pl.Series:
        """The names the whole trace shows for these kernels (one naming across tables)."""
        assert self.attributed is not None
        names = self.attributed.names_shown
        return (
            pl.DataFrame({"Kernel": kernels})
            .join(names, on="Kernel", how="left", maintain_order="left")["_name"]
            .fill_null(kernels)
        )

    def freq_table(self, column: str, state: KernelsState | None = None) -> pl.DataFrame:
        """Count, time and share per value of `column` over the kernels of the filter."""
        key = SHOWN_AS.get(column, column)
        rows = self._rows(pick=False, state=state, columns=(key, "Duration (ns)"))
        f = frequency(rows, key)
        total = f["Total Time (ns)"].sum() or 1
        shown = self._display_names(f[key]) if key == "Kernel" else f[key]
        return f.with_columns(
            bar(pl.col("Total Time (ns)") / total).alias("Share"),
            pl.col(key).alias("_key"),
            pl.col(key).cast(pl.String).alias("_full"),
            shown.alias(column),
        ).select(column, "Count", "Count (%)", "Total Time (ns)", "Time (%)", "Share", "_key", "_full")

    def refresh_table(self) -> None:
        if self.kern_sum is not None and self.kern_sum.note:  # no GPU kernels: what there is instead
            cpu = self.kern_sum.cpu_ops
            self.table.set_frame(cpu if cpu is not None else self.summary())
            # the note of `kview kernels`'s document: what the trace holds, and that its CPU op times are shown
            self.status.update(Text(self.kern_sum.note[0].upper() + self.kern_sum.note[1:], style="bold"))
            self.detail.update("")
            return
        self._regroups += 1
        self.regroup(self._regroups, self.state)

    @work(thread=True, exit_on_error=False, exclusive=True, group="kernels-regroup")
    def regroup(self, n: int, state: KernelsState) -> None:
        """The table of `state` made off the UI thread, handed back to be shown."""
        self.post_message(Regrouped(n, state, self.table_of(state)))

    def on_regrouped(self, m: Regrouped) -> None:
        m.stop()
        if m.n == self._regroups and m.state is self.state:  # a later key's table is on its way
            self.show_table(m.table)

    def table_of(self, state: KernelsState) -> KernelsTable:
        """The frame `state` shows and its status line (a worker's: reads `state`, not the view's)."""
        hints = None
        if state.mode == "summary":
            frame = self.summary(state)
            what = f"summary by {GROUPINGS[state.grouping][0]} ({frame.height:,} groups)"
        elif state.mode == "freq" and state.freq is not None:
            frame = self.freq_table(state.freq, state)
            what = f"frequency of {state.freq} ({frame.height:,} values; enter shows a value's kernels)"
        else:
            rows = self._rows(state=state)
            frame = rows.with_columns(pl.col("Kernel").alias("_full"), pl.col("_name").alias("Kernel"))
            hints = self.attributed.text_widths if self.attributed is not None else None
            what = f"per-kernel rows ({frame.height:,}; enter: context)"
        parts = [what]
        if state.scope is not None:
            rows = self._rows(state=state, columns=("Duration (ns)",)) if state.mode != "rows" else frame
            parts.append(
                f"range: {state.scope.label} ({rows.height:,} kernels, "
                f"{fmt_ns(int(rows['Duration (ns)'].sum()))}; esc goes back)"
            )
        if state.filter_text:
            parts.append(f"filter: {state.filter_text}")
        if state.pick:
            parts.append(f"{state.pick[0]} = {state.pick[1]}")
        if self.attributed is None:
            parts.append("attributing kernels…")
        return KernelsTable(frame, hints, "  ·  ".join(parts), state)

    def show_table(self, t: KernelsTable) -> None:
        self.shown_state = t.state
        self.table.set_frame(t.frame, width_hints=t.hints)
        self.status.update(Text(t.status, style="bold"))
        self.show_detail()
        if self.shown_at is None:
            self.shown_at = time.perf_counter()

    def show_detail(self) -> None:
        row = self.table.row()
        if not row:
            self.detail.update("")
            return
        text = row.get("_full") or ""
        if self.shown_state.mode == "rows":
            text = f"{row['Direction']}  {row['Layer']}  {row['Op']} {row['Params']}  ·  {row['NVTX Path']}\n{text}"
        self.detail.update(Text(str(text), overflow="fold"))

    @on(FrameTable.RowHighlighted)
    def _highlighted(self, _event: FrameTable.RowHighlighted) -> None:
        self.show_detail()

    @on(FrameTable.RowSelected)
    def _selected(self, event: FrameTable.RowSelected) -> None:
        self.open_row(event.row)

    def open_row(self, i: int | None = None) -> None:
        """enter: a group's kernels, a value's kernels (frequency table), a kernel's context."""
        row, shown = self.table.row(i), self.shown_state
        if row is None:
            return
        if shown.mode == "rows":
            self.open_context(int(row["Idx"]))
        elif shown.mode == "freq" and shown.freq is not None:
            self.state = replace(shown, mode="rows", pick=(shown.freq, row["_key"]))
        elif self.attributed is not None:
            key = row["_key"] if "_key" in row else row.get("_full")
            if key is None:  # a trace without GPU kernels: the rows are its CPU ops
                self.app.notify("no GPU kernels in this trace: its CPU ops have no kernels to open", timeout=4)
                return
            label = GROUPINGS[shown.grouping][1]
            self.state = replace(shown, mode="rows", pick=(label, key))

    # -- actions and what the app asks for -------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.kern_sum is not None  # no key does anything before the first table

    def action_open_row(self) -> None:
        self.open_row()

    def action_context(self) -> None:
        row = self.table.row()
        if self.shown_state.mode != "rows" or row is None:
            self.app.notify(
                "kernel context is for one kernel: t shows per-kernel rows, then c or enter",
                severity="warning",
                timeout=4,
            )
            return
        self.open_context(int(row["Idx"]))

    def action_frequency(self) -> None:
        """F: the frequency table of the column under the cursor (in a summary, of the column
        grouped by when the cursor is on a statistic)."""
        if self.no_kernels():
            return
        if self.attributed is None:
            self.app.notify("kernels are still being attributed", severity="warning")
            return
        col, shown = self.table.column_at_cursor(), self.shown_state
        source = SHOWN_AS.get(col or "", col or "")
        known = self.attributed.table.collect_schema()
        if col is None or (source not in known) or col in ("Duration (ns)", "Start (ns)"):
            col = GROUPINGS[shown.grouping][1] if shown.mode != "freq" else shown.freq
        if col is None:
            return
        before = shown if shown.mode != "freq" else shown.before
        self.state = replace(shown, mode="freq", freq=col, pick=None, before=before)

    def action_toggle_rows(self) -> None:
        if self.no_kernels():
            return
        if self.attributed is None:
            self.app.notify("per-kernel rows are still being attributed", severity="warning")
            return
        self.state = replace(self.state, mode="rows" if self.mode != "rows" else "summary", freq=None)

    def action_show_on_timeline(self) -> None:
        """The kernel under the cursor on the Timeline; on a group's (or a value's) row, its
        longest instance."""
        if self.no_kernels():
            return
        row = self.table.row()
        if row is None:
            return
        if "Idx" not in row:
            if self.attributed is None:
                self.app.notify("kernels are still being attributed", severity="warning")
                return
            shown = self.shown_state
            if shown.mode == "freq" and shown.freq is not None:
                col, key = shown.freq, row["_key"]
            else:
                col, key = GROUPINGS[shown.grouping][1], row["_key"] if "_key" in row else row["_full"]
            col = SHOWN_AS.get(col, col)
            rows = self._rows(pick=False, state=shown, columns=(col, "Duration (ns)", "Idx"))
            group = rows.filter(pl.col(col) == key if key is not None else pl.col(col).is_null())
            if group.height == 0:
                return
            row = group.row(int(group["Duration (ns)"].arg_max() or 0), named=True)
        self.post_message(ShowOnTimeline(idx=int(row["Idx"])))

    def action_cycle_grouping(self) -> None:
        self.group_by(self.grouping + 1)

    def group_by(self, index: int) -> None:
        """Summarize by GROUPINGS[index] (by name until kernels are attributed)."""
        if self.kern_sum is None or self.no_kernels():
            return
        grouping = index % len(GROUPINGS) if self.attributed is not None else 0
        self.state = replace(self.state, mode="summary", grouping=grouping, pick=None, freq=None)
        self.app.notify(f"grouped by {GROUPINGS[self.grouping][0]}", timeout=2)

    def action_sort(self, descending: bool) -> None:
        col = self.table.sort_by_cursor(descending)
        self.show_detail()
        self.app.notify(f"sorted by {col} {'descending' if descending else 'ascending'}", timeout=2)

    def action_open_filter(self) -> None:
        if self.no_kernels():
            return
        self.finput.display = True
        self.finput.open(self.filter_text)
        self.finput.focus()

    def set_filter(self, text: str, rows: bool = False) -> bool:
        """Apply filter `text` (per kernel when `rows`, once attributed); False, with the reason
        on screen, when it does not parse (the old filter stays)."""
        try:
            filters.parse(text)
        except filters.FilterError as e:  # said on the line above the filter, which stays open
            self.ferror.update(Text(f"✗ {e}", style="bold red"))
            self.ferror.display = True
            return False
        self.ferror.display = False
        text = text.strip()
        if text and (not self.history or self.history[-1] != text):
            self.history.append(text)
        # the grouping stays: a filter narrows the rows each group sums
        mode = "rows" if rows and self.attributed is not None else self.mode
        self.state = replace(self.state, filter_text=text, mode=mode)
        return True

    def show_scope(self, scope: Scope) -> None:
        """Per-kernel rows of exactly the ops of `scope` (enter on an NVTX range)."""
        if self.kern_sum is None or self.no_kernels():
            return
        if self.attributed is None:
            self.app.notify("kernels are still being attributed", severity="warning")
            return
        before = self.state if self.state.scope is None else self.state.before
        self.state = KernelsState(mode="rows", grouping=self.grouping, scope=scope, before=before)

    def show_filtered(self, text: str) -> None:
        """The kernels matching `text`, one row each (a recent filter in the palette)."""
        if self.kern_sum is not None and not self.no_kernels():
            self.set_filter(text, rows=True)

    def open_context(self, idx: int) -> None:
        """The context of GPU op `idx` in a dialog (its lookup in a thread worker)."""
        s = self.session
        if s.current not in s.loaded:
            self.app.notify("the trace is still loading; kernel context once it is in", severity="warning")
            return
        self.kernel_context(s.loaded[s.current], idx)

    @work(thread=True, exit_on_error=False, exclusive=True, group="context")
    def kernel_context(self, trace, idx: int) -> None:
        try:
            ctx = context_of(trace, idx)
        except Exception as e:  # a lookup that fails must not end the session
            self.app.call_from_thread(
                self.app.notify, f"no context for op {idx}: {e}".splitlines()[0], severity="error"
            )
            return
        self.app.call_from_thread(self.app.push_screen, ContextScreen(trace.name, ctx))

    def request(self, m: ForView) -> None:
        if self.attributed is None and self.session.current in self.session.loaded:
            self._asked = m  # the trace shown is being fetched (a jump to another trace): once in
            return
        if isinstance(m, OpenKernels) and m.scope is not None:
            self.show_scope(m.scope)
        elif isinstance(m, OpenKernels):
            self.show_filtered(m.filter_text)

    def palette(self) -> list[tuple[str, Callable[[], object]]]:
        """A grouping by name, and the recent filters."""
        out: list[tuple[str, Callable[[], object]]] = [
            (f"Kernels: group by {g}", partial(self.group_by, i)) for i, (g, _) in enumerate(GROUPINGS)
        ]
        return out + [(f"Filter: {h}", partial(self.show_filtered, h)) for h in reversed(self.history[-10:])]

    @on(Input.Submitted, "#filter")
    def _submitted(self, event: Input.Submitted) -> None:
        if self.set_filter(event.value):
            self.finput.display = False
            self.focus_if_active(self.table)

    def shown(self) -> Shown:
        """The rows and columns as shown, with full kernel names (a report wants them whole),
        named by what they are (`kernels by layer`, `kernels rows`, `kernels frequency of Op`)."""
        if self.kern_sum is None:
            return Shown(pl.DataFrame(), "kernels")
        t, st = self.table, self.shown_state
        frame = t.shown()
        full = t.sorted_frame()["_full"] if "_full" in t.frame.columns else None
        name_col = next((c for c in ("Kernel", "Name") if c in frame.columns), None)
        if (
            full is not None
            and name_col
            and (st.mode == "rows" or GROUPINGS[st.grouping][1] == "Kernel" or st.freq in ("Kernel", "Name"))
        ):
            frame = frame.with_columns(full.alias(name_col))
        what = {"rows": "kernels rows", "freq": f"kernels frequency of {st.freq}"}.get(
            st.mode, f"kernels by {GROUPINGS[st.grouping][0]}"
        )
        return Shown(frame, what, BARS)

    def back(self) -> bool:
        if self.kern_sum is None:
            return False
        if self.finput.display:
            self.finput.display = self.ferror.display = False
            self.focus_if_active(self.table)
            return True
        if self.pick and self.state.freq:  # out of a value's kernels: its frequency table
            self.state = replace(self.state, mode="freq", pick=None)
            return True
        if self.mode == "freq":  # out of the frequency table: what was shown before it
            self.state = self.state.before or replace(self.state, mode="summary", freq=None)
            return True
        if self.pick:
            self.state = replace(self.state, mode="summary", pick=None)
            return True
        if self.state.scope is not None:
            # leave the jump: the view as it was, and the view we came from
            scope = self.state.scope
            self.state = self.state.before or KernelsState(grouping=self.grouping)
            if scope.back_to:
                self.app.call_later(self.app.action_show_view, scope.back_to)  # type: ignore[attr-defined]
            return True
        if self.mode == "rows":
            self.state = replace(self.state, mode="summary")
            return True
        if self.filter_text:
            self.set_filter("")
            return True
        return False
