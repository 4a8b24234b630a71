"""NVTX: the range tree, GPU and CPU time per path; enter opens Kernels filtered to a range."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual import on
from textual.reactive import var
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from kview.analysis.nvtx_tree import ops_in_windows
from kview.output.format import bar, fmt_ns
from kview.tui.messages import NvtxTree, OpenKernels, Scope
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

    def reveal(self, path_id: int) -> TreeNode[dict] | None:
        """Expand the ancestors of range path `path_id` and put the cursor on it."""
        if self.data is None or not hasattr(self, "range_tree"):
            return None
        parent_of = dict(zip(self.data.paths["path_id"].to_list(), self.data.paths["parent_id"].to_list()))
        chain = []
        pid: int | None = path_id
        while pid is not None:
            chain.append(pid)
            pid = parent_of.get(pid)
        node = self.range_tree.root
        for pid in reversed(chain):
            if node.data is not None and not node.children:
                self._add_ranges(node, node.data["path_id"])
            node.expand()
            found = next((n for n in node.children if n.data and n.data["path_id"] == pid), None)
            if found is None:
                return None
            node = found
        # the tree lays out the nodes just added at its next refresh; the cursor goes there then
        self.range_tree.call_after_refresh(self._put_cursor, node)
        return node

    def _put_cursor(self, node: TreeNode[dict]) -> None:
        self.range_tree.move_cursor(node)
        self.range_tree.scroll_to_node(node, animate=False)

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
        """Kernels restricted to the ops this range's GPU time counts (launched while one of
        its instances was open), not a text filter: kernel rows never carry op-marker labels."""
        r = event.node.data
        if not r or self.data is None:
            return
        idx = ops_in_windows(self.data.windows, self.data.timeline, r["path_id"])
        self.post_message(OpenKernels(scope=Scope(r["Path"], idx, back_to=self.view_id)))

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        if self.data is None:
            return pl.DataFrame(), self.view_id
        cols = ["Path", "Instances", "CPU (ns)", "GPU (ns)", "Kernels"]
        return self.data.paths.sort("Path").select(cols), self.view_id
