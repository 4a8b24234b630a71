"""The five views. Each view turns TraceData into widgets and knows the table it shows."""
from __future__ import annotations

import re

import polars as pl
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Input, LoadingIndicator, Static, Tree

from kview.analysis import filters
from kview.analysis.kernel_names import short_names
from kview.analysis.layers import stacked_bars
from kview.analysis.overview import _fmt_ns

from kview.tui.frame_table import CATEGORY_COLOURS, FrameTable
from kview.tui.keymap import VIEW_KEYS

GROUPINGS = [("name", "Kernel"), ("short name", "Short name"), ("category", "Category"), ("layer", "Layer"),
             ("op", "Op"), ("direction", "Direction"), ("range", "Range")]


def share_bar(frac: pl.Expr, width: int = 10) -> pl.Expr:
    cells = (frac * width * 8).round(0).cast(pl.Int64)
    full = (cells // 8).cast(pl.UInt32)
    part = cells % 8
    eighths = pl.Series(["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"])
    return pl.concat_str([pl.lit("█").repeat_by(full).list.join(""),
                          part.replace_strict(list(range(8)), eighths.to_list(), default="")])


class View(Vertical):
    """Base: a loading indicator until data arrives, then `build()`."""

    name_ = ""
    DEFAULT_CSS = "View { height: 1fr; } View > LoadingIndicator { height: 3; }"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.data = None
        self.extra = []

    def compose(self) -> ComposeResult:
        yield LoadingIndicator()
        yield Static("loading…", classes="stage")

    def set_stage(self, text: str) -> None:
        for s in self.query(".stage"):
            s.update(f"loading: {text}…")

    def set_data(self, data, extra=()) -> None:
        self.data, self.extra = data, list(extra)
        self.remove_children()
        self.build()

    def build(self) -> None:  # pragma: no cover - overridden
        pass

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        t = self.query(FrameTable)
        return (t.first().shown(), self.name_) if t else (pl.DataFrame(), self.name_)

    def back(self) -> bool:
        return False

    def focus_if_active(self, widget) -> None:
        """Focus `widget` only when this view's tab is the active one (focusing a widget in a
        hidden pane would bring that pane forward)."""
        try:
            from textual.widgets import TabbedContent

            if self.app.query_one(TabbedContent).active == self.name_:
                widget.focus()
        except Exception:
            pass


class OverviewView(View):
    name_ = "overview"

    def build(self) -> None:
        o = self.data.overview
        facts = Table.grid(padding=(0, 2))
        for k, v in o.facts:
            facts.add_row(Text(k, style="bold"), v)
        parts = [Static(facts)]
        if o.busy.height:
            parts.append(Static(self._table("GPU busy", o.busy)))
        if o.gaps.height:
            parts.append(Static(self._table("Largest idle gaps", o.gaps.with_columns(short_names(o.gaps["Next kernel"])))))
        parts.append(Static(self._table("Time by category", o.categories, colour="Category")))
        if o.phases.height:
            parts.append(Static(self._table("Time by phase", o.phases)))
        parts.append(Static(self._table("Top kernels", o.top_kernels.with_columns(
            short_names(o.top_kernels["Kernel"])), colour="Category")))
        findings = Text("Findings\n", style="bold")
        for f in o.findings:
            findings.append("• " + f + "\n")
        parts.append(Static(findings))
        self.mount(VerticalScroll(*parts))

    @staticmethod
    def _table(title, df: pl.DataFrame, colour: str | None = None) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", expand=False)
        for c, dt in df.schema.items():
            t.add_column(c, justify="right" if dt.is_numeric() else "left", overflow="ellipsis", max_width=60,
                         no_wrap=True)
        for row in df.iter_rows(named=True):
            style = CATEGORY_COLOURS.get(row.get(colour)) if colour else None
            t.add_row(*[("" if v is None else f"{v:,}" if isinstance(v, int) else str(v)) for v in row.values()],
                      style=style)
        return t

    def table_for_copy(self):
        o = self.data.overview
        return o.categories, "overview"


class FilterInput(Input):
    """The filter line: up/down walk the history of filters."""

    BINDINGS = [Binding("up", "history(-1)", show=False), Binding("down", "history(1)", show=False)]

    def __init__(self, history: list[str], **kw):
        super().__init__(**kw)
        self.history, self.pos = history, len(history)

    def action_history(self, d: int) -> None:
        if self.history:
            self.pos = max(0, min(len(self.history), self.pos + d))
            self.value = self.history[self.pos] if self.pos < len(self.history) else ""
            self.cursor_position = len(self.value)


class KernelsView(View):
    name_ = "kernels"
    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in VIEW_KEYS["kernels"] if a]

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


class NvtxView(View):
    name_ = "nvtx"

    def build(self) -> None:
        paths = self.data.paths
        if paths is None or paths.height == 0:
            self.mount(Static("This trace has no NVTX ranges."))
            return
        self.children_of = {k: v for k, v in paths.sort("GPU (ns)", descending=True).group_by(
            "parent_id", maintain_order=True)}
        self.total = max(int(paths.filter(pl.col("Depth") == 0)["GPU (ns)"].sum()), 1)
        self.range_tree = Tree(f"{self.data.trace.name}  (GPU time · CPU time · instances · kernels)", id="nvtx-tree")
        self.range_tree.auto_expand = False
        self.range_tree.root.expand()
        self._add_children(self.range_tree.root, None)
        self.detail = Static("", id="nvtx-detail")
        self.mount(self.range_tree, self.detail)
        self.focus_if_active(self.range_tree)

    def _label(self, r: dict) -> Text:
        frac = r["GPU (ns)"] / self.total
        bar = "█" * int(frac * 10) + ("▌" if (frac * 10) % 1 >= 0.5 else "")
        t = Text(f"{r['Name'][:60]}  ", style="bold" if r["Depth"] < 2 else "")
        t.append(f"{_fmt_ns(r['GPU (ns)'])}  {_fmt_ns(r['CPU (ns)'])}  ×{r['Instances']:,}  {r['Kernels']:,}k  ")
        t.append(bar, style="cyan")
        return t

    def _add_children(self, node, parent_id) -> None:
        key = (parent_id,)
        kids = self.children_of.get(key)
        if kids is None:
            return
        for r in kids.iter_rows(named=True):
            has_kids = (r["path_id"],) in self.children_of
            node.add(self._label(r), data=r, allow_expand=has_kids)

    @on(Tree.NodeExpanded)
    def _expanded(self, event) -> None:
        node = event.node
        if node.data is not None and not node.children:
            self._add_children(node, node.data["path_id"])

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event) -> None:
        if event.node.data:
            self.detail.update(Text(event.node.data["Path"], overflow="fold"))

    @on(Tree.NodeSelected)
    def _selected(self, event) -> None:
        r = event.node.data
        if not r:
            return
        parts = r["Path"].split(" > ")
        user = [p for p in parts if "::" not in p and "Backward" not in p]
        flt = []
        if user:
            flt.append(f'range:"(^| > ){re.escape(user[-1])}( > |$)"')
        if parts[-1] not in user:
            flt.append(f'op:"^{re.escape(parts[-1].removeprefix("aten::"))}$"')
        self.app.open_kernels_filtered(" ".join(flt))

    def table_for_copy(self):
        cols = ["Path", "Instances", "CPU (ns)", "GPU (ns)", "Kernels"]
        return self.data.paths.sort("Path").select(cols), "nvtx"


class LayersView(View):
    name_ = "layers"
    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in VIEW_KEYS["layers"] if a]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.by_time = False

    def build(self) -> None:
        df = self.data.layers
        if df is None or df.height == 0:
            self.mount(Static("No repeated layer ranges (layer_0.., Enc_0.., Embedding_0..) in this trace."))
            return
        self.status = Static("", id="layers-status")
        self.table = FrameTable(id="layers-table")
        self.mount(self.status, self.table)
        self.render_layers()
        self.focus_if_active(self.table)

    def render_layers(self) -> None:
        df = self.data.layers
        if self.by_time:
            df = df.sort("Total (ns)", descending=True)
        parts = ["Forward (ns)", "Backward (ns)"]
        width = 24 if self.app.size.width < 120 else 40
        bar = stacked_bars(df, parts, width=width).alias("Forward █ Backward ▓")
        subs = [c for c in df.columns if c not in ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "Kernels")]
        extra = []
        if len(subs) >= 2:  # nested ranges: the same total split by sublayer (attention / ffn ...)
            names = " ".join(f"{g} {c.removesuffix(' (ns)')}" for g, c in zip("█▓▒░", subs))
            extra = [stacked_bars(df, subs, width=width).alias(names)]
        df = df.select("Layer", bar, *extra, pl.all().exclude("Layer"))
        self.table.set_frame(df)
        self.status.update(Text(f"{df.height} layers · ordered by {'time' if self.by_time else 'index'} (o)",
                                style="bold"))

    def action_toggle_order(self) -> None:
        self.by_time = not self.by_time
        self.render_layers()


class CompareView(View):
    name_ = "compare"
    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in VIEW_KEYS["compare"] if a]

    def build(self) -> None:
        from kview.analysis.compare import phase_windows, root_window, side_by_side, user_ranges

        traces = [self.data.trace] + [d.trace for d in self.extra]
        try:
            if len(traces) > 1:
                has_root = all(user_ranges(t).filter(pl.col("label") == "profiled_step").height for t in traces)
                windows = [root_window(t, "profiled_step" if has_root else None) for t in traces]
                df, what = side_by_side(windows, "range"), f"{len(traces)} traces by range (GPU time)"
            else:
                phases = self.data.phases["Phase"].to_list() if self.data.phases is not None else []
                if len(phases) < 2:
                    self.mount(Static("Open two or more traces (kview A B) or a trace with phase ranges to compare."))
                    return
                df = side_by_side(phase_windows(self.data.trace, phases), "category")
                what = "phases of this trace by kernel category (GPU time)"
        except ValueError as e:
            self.mount(Static(str(e)))
            return
        self.table = FrameTable(df, id="compare-table")
        self.mount(Static(Text(what, style="bold")), self.table)
        self.focus_if_active(self.table)

    def action_sort(self, descending: bool) -> None:
        self.table.sort_by_cursor(descending)
