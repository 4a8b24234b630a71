"""NVTX: the range tree, GPU and CPU time per path; enter opens Kernels filtered to a range."""

from __future__ import annotations

import re

import polars as pl
from rich.text import Text
from textual import on
from textual.reactive import var
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from kview.output.format import bar, fmt_ns
from kview.tui.messages import NvtxTree, OpenKernels
from kview.tui.views.base import View


class NvtxView(View):
    view_id = "nvtx"
    title = "NVTX"

    data: var[NvtxTree | None] = var(None, init=False)

    def on_nvtx_tree(self, m: NvtxTree) -> None:
        self.data = m

    def watch_data(self, m: NvtxTree) -> None:
        paths = m.paths
        if paths.height == 0:
            self.show(Static("This trace has no NVTX ranges."))
            return
        total = max(int(paths.filter(pl.col("Depth") == 0)["GPU (ns)"].sum()), 1)
        paths = paths.with_columns(bar(pl.col("GPU (ns)") / total).alias("_bar"))  # share of all ranges' GPU time
        self.children_of = {
            k: v for k, v in paths.sort("GPU (ns)", descending=True).group_by("parent_id", maintain_order=True)
        }
        self.range_tree: Tree[dict] = Tree(
            f"{m.trace_name}  (GPU time · CPU time · instances · kernels)", id="nvtx-tree"
        )
        self.range_tree.auto_expand = False
        self.range_tree.root.expand()
        self._add_ranges(self.range_tree.root, None)
        self.detail = Static("", id="nvtx-detail")
        self.show(self.range_tree, self.detail)
        self.focus_if_active(self.range_tree)

    @staticmethod
    def _label(r: dict) -> Text:
        t = Text(f"{r['Name'][:60]}  ", style="bold" if r["Depth"] < 2 else "")
        n = r["Kernels"]
        t.append(
            f"{fmt_ns(r['GPU (ns)'])}  {fmt_ns(r['CPU (ns)'])}  ×{r['Instances']:,}  "
            f"{n:,} kernel{'' if n == 1 else 's'}  "
        )
        t.append(r["_bar"], style="cyan")
        return t

    def _add_ranges(self, node: TreeNode[dict], parent_id: int | None) -> None:
        """Add the ranges under `parent_id` below `node` (on first expansion: a deep tree is
        never built whole)."""
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
            self._add_ranges(node, node.data["path_id"])

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
        self.post_message(OpenKernels(" ".join(flt)))

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        if self.data is None:
            return pl.DataFrame(), self.view_id
        cols = ["Path", "Instances", "CPU (ns)", "GPU (ns)", "Kernels"]
        return self.data.paths.sort("Path").select(cols), self.view_id
