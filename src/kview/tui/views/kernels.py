"""Kernels: the kernel summary (exactly `cuda_gpu_kern_sum`), regrouped, filtered, or per kernel."""
from __future__ import annotations

import polars as pl
from rich.text import Text
from textual import on
from textual.widgets import Input, Static
from textual.suggester import SuggestFromList

from kview.analysis import filters
from kview.analysis.kernel_names import short_names
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.views.base import View
from kview.tui.widgets.filter_input import FilterInput
from kview.tui.widgets.frame_table import CATEGORY_COLOURS, FrameTable

GROUPINGS = [("name", "Kernel"), ("short name", "Short name"), ("category", "Category"), ("layer", "Layer"),
             ("op", "Op"), ("direction", "Direction"), ("range", "Range")]


def share_bar(frac: pl.Expr, width: int = 10) -> pl.Expr:
    cells = (frac * width * 8).round(0).cast(pl.Int64)
    full = (cells // 8).cast(pl.UInt32)
    part = cells % 8
    eighths = pl.Series(["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"])
    return pl.concat_str([pl.lit("█").repeat_by(full).list.join(""),
                          part.replace_strict(list(range(8)), eighths.to_list(), default="")])


class KernelsView(View):
    view_id = "kernels"
    title = "Kernels"
    BINDINGS = bindings(VIEW_KEYS["kernels"])

    def __init__(self, **kw):
        super().__init__(**kw)
        self.mode = "summary"
        self.grouping = 0
        self.filter_text = ""
        self.pick: tuple[str, str] | None = None
        self.history: list[str] = []

    def build(self) -> None:
        self.table = FrameTable(hidden=("_full", "_grid", "_block", "_key", "_short", "_range"), id="kernels-table",
                                narrow=("Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Start (ns)", "Stream",
                                        "Device", "Grid", "Block", "Correlation", "NVTX Path", "TC", "FLOPs", "Bytes",
                                        "Params", "Category"))
        self.status = Static("", id="kernels-status")
        self.detail = Static("", id="kernels-detail")
        suggest = ["dir:fprop", "dir:bprop", "dir:optim"] + [f"cat:{c}" for c in CATEGORY_COLOURS]
        names = self.data.names or []
        self.finput = FilterInput(self.history, placeholder="filter: gemm dir:bprop layer:layer_3 dur>50us -cat:memset",
                                  suggester=SuggestFromList(suggest + names, case_sensitive=False), id="filter")
        self.finput.display = False
        self.mount(self.status, self.table, self.detail, self.finput)
        self.refresh_table()
        self.focus_if_active(self.table)

    # -- the table ----------------------------------------------------------------
    def _rows(self) -> pl.DataFrame:
        if self.pick:
            self._ensure_key(self.pick[0])
        t = self.data.table
        if t is None:
            return pl.DataFrame()
        if self.filter_text:
            t = filters.apply(t, self.filter_text)
        if self.pick:
            col, val = self.pick
            t = t.filter(self._key_expr(col) == val)
        return t

    DERIVED = {"Short name": "_short", "Range": "_range"}

    def _ensure_key(self, label: str) -> None:
        """Derived grouping keys are computed once per trace, as columns of the table, so a
        filter or a group switch never recomputes them over a million rows."""
        col = self.DERIVED.get(label)
        t = self.data.table
        if col is None or t is None or col in t.columns:
            return
        if label == "Short name":
            t = t.with_columns(short_names(t["Kernel"]).alias(col))
        else:
            t = t.with_columns(pl.col("NVTX Path").str.split(" > ").list.last().alias(col))
        self.data.table = t

    def _key_expr(self, label: str) -> pl.Expr:
        self._ensure_key(label)
        return pl.col(self.DERIVED.get(label, label))

    def summary(self) -> pl.DataFrame:
        label = GROUPINGS[self.grouping][1]
        self._ensure_key(label)
        if self.data.table is None or (label == "Kernel" and not self.filter_text):
            k = self.data.kern_sum  # exactly cuda_gpu_kern_sum
            total = k["Total Time (ns)"].sum() or 1
            return k.with_columns(share_bar(pl.col("Total Time (ns)") / total).alias("Share"),
                                  pl.col("Name").alias("_full"),
                                  short_names(k["Name"]).alias("Name"))
        rows = self._rows()
        if label == "Kernel":
            rows = rows.filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
        d = pl.col("Duration (ns)")
        g = rows.with_columns(self._key_expr(label).alias("_key")).group_by("_key").agg(
            d.sum().alias("Total Time (ns)"), pl.len().alias("Instances"), d.mean().round(1).alias("Avg (ns)"),
            d.median().alias("Med (ns)"), d.min().alias("Min (ns)"), d.max().alias("Max (ns)"),
            d.std().fill_null(0).round(1).alias("StdDev (ns)"), pl.col("Category").mode().first().alias("_cat"))
        total = g["Total Time (ns)"].sum() or 1
        g = g.sort(["Total Time (ns)", "_key"], descending=[True, False])
        g = g.with_columns((pl.col("Total Time (ns)") * 100.0 / total).round(1).alias("Time (%)"),
                           share_bar(pl.col("Total Time (ns)") / total).alias("Share"), pl.col("_key").alias("_full"))
        shown = short_names(g["_key"]) if label == "Kernel" else g["_key"]
        cat = [] if label == "Category" else [pl.col("_cat").alias("Category")]
        return g.with_columns(shown.alias(label)).select(
            "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
            label, "Share", *cat, "_full", "_key")

    def refresh_table(self) -> None:
        if self.mode == "summary":
            frame = self.summary()
        else:
            rows = self._rows()
            frame = rows.with_columns(pl.col("Kernel").alias("_full"), short_names(rows["Kernel"]).alias("Kernel"))
        self.table.set_frame(frame)
        grouping = GROUPINGS[self.grouping][0]
        what = f"per-kernel rows ({frame.height:,})" if self.mode == "rows" else f"summary by {grouping} ({frame.height:,} groups)"
        parts = [what]
        if self.filter_text:
            parts.append(f"filter: {self.filter_text}")
        if self.pick:
            parts.append(f"{self.pick[0]} = {self.pick[1]}")
        if self.data.table is None:
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
    def _highlighted(self, _event) -> None:
        self.show_detail()

    @on(FrameTable.RowSelected)
    def _selected(self, event) -> None:
        if self.mode == "summary":
            row = self.table.row(event.row)
            label = GROUPINGS[self.grouping][1]
            self.pick = (label, row["_key"] if "_key" in row else row["_full"])
            self.mode = "rows"
            self.refresh_table()

    # -- actions -------------------------------------------------------------------
    def action_toggle_rows(self) -> None:
        if self.data.table is None:
            self.app.notify("per-kernel rows are still being attributed", severity="warning")
            return
        self.mode = "rows" if self.mode == "summary" else "summary"
        self.refresh_table()

    def action_cycle_grouping(self) -> None:
        self.grouping = (self.grouping + 1) % len(GROUPINGS)
        if self.data.table is None:
            self.grouping = 0
        self.mode = "summary"
        self.pick = None
        self.refresh_table()
        self.app.notify(f"grouped by {GROUPINGS[self.grouping][0]}", timeout=2)

    def action_sort(self, descending: bool) -> None:
        col = self.table.sort_by_cursor(descending)
        self.show_detail()
        self.app.notify(f"sorted by {col} {'descending' if descending else 'ascending'}", timeout=2)

    def action_open_filter(self) -> None:
        self.finput.display = True
        self.finput.value = self.filter_text
        self.finput.focus()

    def set_filter(self, text: str) -> bool:
        try:
            filters.parse(text)
        except filters.FilterError as e:
            self.app.notify(str(e), title="filter", severity="error")
            return False
        self.filter_text = text.strip()
        if self.filter_text and (not self.history or self.history[-1] != self.filter_text):
            self.history.append(self.filter_text)
        if self.data.table is not None and self.filter_text:
            self.mode = "rows" if self.mode == "rows" or GROUPINGS[self.grouping][1] != "Kernel" else self.mode
        self.refresh_table()
        return True

    @on(Input.Submitted, "#filter")
    def _submitted(self, event: Input.Submitted) -> None:
        if self.set_filter(event.value):
            self.finput.display = False
            self.focus_if_active(self.table)

    def table_for_copy(self):
        """The rows and columns as shown, with full kernel names (a report wants them whole)."""
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
        return frame.select([c for c in frame.columns if c not in t.hidden]), "kernels"

    def back(self) -> bool:
        if self.finput.display:
            self.finput.display = False
            self.focus_if_active(self.table)
            return True
        if self.pick:
            self.pick = None
            self.mode = "summary"
            self.refresh_table()
            return True
        if self.mode == "rows":
            self.mode = "summary"
            self.refresh_table()
            return True
        if self.filter_text:
            self.set_filter("")
            return True
        return False
