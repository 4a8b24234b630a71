"""Kernels: the kernel summary (exactly `cuda_gpu_kern_sum`), regrouped, filtered, or per kernel."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import polars as pl
from rich.text import Text
from textual import on
from textual.reactive import var
from textual.widgets import Input, Static

from kview.analysis import filters
from kview.analysis.kernel_groups import STATS, group_stats
from kview.output.format import bar, fmt_ns, short_names
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import AttributedKernels, KernelSummary, Scope
from kview.tui.views.base import View
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


@dataclass(frozen=True)
class KernelsState:
    """What the Kernels view shows; one value, so a key that changes several parts (a group
    switch also leaves the drill-in) refreshes the table once."""

    mode: str = "summary"  # "summary": a row per group; "rows": a row per kernel
    grouping: int = 0  # index into GROUPINGS
    filter_text: str = ""
    pick: tuple[str, Any] | None = None  # (grouped-by column, key) of the group drilled into
    scope: Scope | None = None  # only these ops (an NVTX range's), until escape
    before: KernelsState | None = None  # what escape restores after a jump into a scope


class KernelsView(View):
    view_id = "kernels"
    title = "Kernels"
    BINDINGS = bindings(VIEW_KEYS["kernels"])

    kern_sum: var[KernelSummary | None] = var(None, init=False)
    attributed: var[AttributedKernels | None] = var(None, init=False)
    state: var[KernelsState] = var(KernelsState, init=False)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.history: list[str] = []  # filters applied, oldest first (the filter line walks it)
        self.shown_at: float | None = None  # perf_counter() when the first table was built

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
        self.table = FrameTable(
            hidden=("_full", "_grid", "_block", "_key", "_short", "_range"),
            id="kernels-table",
            narrow=(
                "Med (ns)",
                "Min (ns)",
                "Max (ns)",
                "StdDev (ns)",
                "Start (ns)",
                "Stream",
                "Device",
                "Grid",
                "Block",
                "Correlation",
                "NVTX Path",
                "TC",
                "FLOPs",
                "Bytes",
                "Params",
                "Category",
            ),
        )
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
        self.refresh_table()
        self.shown_at = time.perf_counter()
        self.focus_if_active(self.table)

    def watch_attributed(self) -> None:
        self.finput.suggester = self._suggester()
        self.refresh_table()

    def watch_state(self) -> None:
        if self.kern_sum is not None:
            self.refresh_table()

    def _suggester(self) -> TermSuggester:
        words = ["dir:fprop", "dir:bprop", "dir:optim"] + [f"cat:{c}" for c in CATEGORY_COLOURS]
        return TermSuggester(words + (list(self.attributed.words) if self.attributed is not None else []))

    # -- the table ----------------------------------------------------------------
    def _rows(self) -> pl.DataFrame:
        if self.attributed is None:
            return pl.DataFrame()
        t = self.attributed.table
        if self.state.scope is not None:
            t = self._scoped(t, self.state.scope)
        if self.filter_text:
            t = filters.apply(t, self.filter_text)
        if self.pick:
            col, val = self.pick
            t = t.filter(pl.col(DERIVED.get(col, col)) == val)
        return t

    def no_kernels(self) -> bool:
        """True (and the user told so) when the trace has no GPU kernels to summarize."""
        if self.kern_sum is not None and self.kern_sum.note:
            self.app.notify(self.kern_sum.note, severity="warning", timeout=4)
            return True
        return False

    def _scoped(self, table: pl.DataFrame, scope: Scope) -> pl.DataFrame:
        """The rows of `scope`, kept while the scope stays (each key re-filters only what remains)."""
        cached = getattr(self, "_scope_rows", None)
        if cached is None or cached[0] is not scope or cached[1] is not table:
            cached = (scope, table, table.filter(pl.col("Idx").is_in(scope.idx.implode())))
            self._scope_rows = cached
        return cached[2]

    def summary(self) -> pl.DataFrame:
        label = GROUPINGS[self.grouping][1]
        if self.attributed is None or (label == "Kernel" and not self.filter_text and self.state.scope is None):
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
                short_names(k["Name"]).alias("Name"),
            )
        rows = self._rows()
        if label == "Kernel":
            rows = rows.filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
        key = DERIVED.get(label, label)
        g = group_stats(rows, key)
        total = g["Total Time (ns)"].sum() or 1
        shown = short_names(g[key]) if label == "Kernel" else g[key]
        return g.with_columns(
            bar(pl.col("Total Time (ns)") / total).alias("Share"),
            pl.col(key).alias("_full"),
            pl.col(key).alias("_key"),
            shown.alias(label),
        ).select(*STATS, label, "Share", *([] if label == "Category" else ["Category"]), "_full", "_key")

    def refresh_table(self) -> None:
        if self.kern_sum is not None and self.kern_sum.note:  # no GPU kernels: what there is instead
            cpu = self.kern_sum.cpu_ops
            self.table.set_frame(cpu if cpu is not None else self.summary())
            shown = " · its CPU op times (calls, total and self time)" if cpu is not None and cpu.height else ""
            self.status.update(Text(self.kern_sum.note[0].upper() + self.kern_sum.note[1:] + shown, style="bold"))
            self.detail.update("")
            return
        if self.mode == "summary":
            frame = self.summary()
        else:
            rows = self._rows()
            frame = rows.with_columns(pl.col("Kernel").alias("_full"), short_names(rows["Kernel"]).alias("Kernel"))
        self.table.set_frame(frame)
        grouping = GROUPINGS[self.grouping][0]
        what = (
            f"per-kernel rows ({frame.height:,})"
            if self.mode == "rows"
            else f"summary by {grouping} ({frame.height:,} groups)"
        )
        parts = [what]
        if self.state.scope is not None:
            rows = self._rows() if self.mode == "summary" else frame
            parts.append(
                f"range: {self.state.scope.label} ({rows.height:,} kernels, "
                f"{fmt_ns(int(rows['Duration (ns)'].sum()))}; esc goes back)"
            )
        if self.filter_text:
            parts.append(f"filter: {self.filter_text}")
        if self.pick:
            parts.append(f"{self.pick[0]} = {self.pick[1]}")
        if self.attributed is None:
            parts.append("attributing kernels…")
        self.status.update(Text("  ·  ".join(parts), style="bold"))
        self.show_detail()

    def show_detail(self) -> None:
        row = self.table.row()
        if not row:
            self.detail.update("")
            return
        text = row.get("_full") or ""
        if self.mode == "rows":
            text = f"{row['Direction']}  {row['Layer']}  {row['Op']} {row['Params']}\n{text}"
        self.detail.update(Text(str(text), overflow="fold"))

    @on(FrameTable.RowHighlighted)
    def _highlighted(self, _event: FrameTable.RowHighlighted) -> None:
        self.show_detail()

    @on(FrameTable.RowSelected)
    def _selected(self, event: FrameTable.RowSelected) -> None:
        if self.mode == "summary":
            row = self.table.row(event.row)
            if row is None:
                return
            label = GROUPINGS[self.grouping][1]
            self.state = replace(self.state, mode="rows", pick=(label, row["_key"] if "_key" in row else row["_full"]))

    # -- actions and what the app asks for -------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.kern_sum is not None  # no key does anything before the first table

    def action_toggle_rows(self) -> None:
        if self.no_kernels():
            return
        if self.attributed is None:
            self.app.notify("per-kernel rows are still being attributed", severity="warning")
            return
        self.state = replace(self.state, mode="rows" if self.mode == "summary" else "summary")

    def action_cycle_grouping(self) -> None:
        self.group_by(self.grouping + 1)

    def group_by(self, index: int) -> None:
        """Summarize by GROUPINGS[index] (by name until kernels are attributed)."""
        if self.kern_sum is None or self.no_kernels():
            return
        grouping = index % len(GROUPINGS) if self.attributed is not None else 0
        self.state = replace(self.state, mode="summary", grouping=grouping, pick=None)
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
        """The kernels matching `text`, one row each (enter on an NVTX range, a recent filter in
        the palette)."""
        if self.kern_sum is not None and not self.no_kernels():
            self.set_filter(text, rows=True)

    @on(Input.Submitted, "#filter")
    def _submitted(self, event: Input.Submitted) -> None:
        if self.set_filter(event.value):
            self.finput.display = False
            self.focus_if_active(self.table)

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        """The rows and columns as shown, with full kernel names (a report wants them whole)."""
        if self.kern_sum is None:
            return pl.DataFrame(), self.view_id
        t = self.table
        frame = t.sorted_frame()
        if self.mode == "rows":
            name_col = "Kernel"
        elif GROUPINGS[self.grouping][1] == "Kernel":
            name_col = "Name" if "Name" in frame.columns else "Kernel"  # report summary or regrouped
        else:
            name_col = None  # grouped by something else: the shown key is the full value
        if name_col and "_full" in frame.columns:
            frame = frame.with_columns(pl.col("_full").alias(name_col))
        return frame.select([c for c in frame.columns if c not in t.hidden]), self.view_id

    def back(self) -> bool:
        if self.kern_sum is None:
            return False
        if self.finput.display:
            self.finput.display = self.ferror.display = False
            self.focus_if_active(self.table)
            return True
        if self.state.scope is not None:  # leave the jump: the view as it was, and the view we came from
            scope = self.state.scope
            self.state = self.state.before or KernelsState(grouping=self.grouping)
            if scope.back_to:
                self.app.call_later(self.app.action_show_view, scope.back_to)  # type: ignore[attr-defined]
            return True
        if self.pick or self.mode == "rows":
            self.state = replace(self.state, mode="summary", pick=None)
            return True
        if self.filter_text:
            self.set_filter("")
            return True
        return False
