"""NVTX: the range tree, GPU and CPU time per path; enter opens Kernels on exactly the ops a
range's GPU time counts; `/` finds ranges anywhere in the tree (n/N: next and previous)."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
from rich.text import Text
from textual import on
from textual.reactive import var
from textual.widgets import Input, Static, Tree
from textual.widgets.tree import TreeNode

from kview.analysis.nvtx_tree import ops_in_windows
from kview.notation import bar, cut, fmt_ns
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import child_paths, nvtx_document
from kview.tui.messages import NvtxTree, OpenKernels, Scope, ShowOnTimeline
from kview.tui.views.base import Shown, View
from kview.tui.widgets.filter_input import FilterInput

NAME_WIDTH = 60


class NvtxView(View):
    view_id = "nvtx"
    title = "NVTX"
    document = nvtx_document
    fetched_last = True
    BINDINGS = bindings(VIEW_KEYS["nvtx"])

    data: var[NvtxTree | None] = var(None, init=False)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.history: list[str] = []
        self.found: list[int] = []  # path ids matching the search, most GPU time first
        self.at = 0

    def on_nvtx_tree(self, m: NvtxTree) -> None:
        self.data = m

    def watch_data(self, m: NvtxTree) -> None:
        paths = m.paths
        if paths.height == 0:
            self.show(Static("This trace has no NVTX ranges."))
            return
        self.total_gpu = max(int(paths.filter(pl.col("Depth") == 0)["GPU (ns)"].sum()), 1)
        # every path's children together, most GPU time first (made with the document, not
        # here on the UI thread): a node's rows are one slice of it, named and drawn only when
        # their parent is expanded
        self.rows = m.children["row"].to_numpy()
        self.parents = m.children["parent_id"].to_numpy()
        self.range_tree: Tree[dict] = Tree(
            f"{m.trace_name}  (GPU time · CPU time · instances · GPU ops)", id="nvtx-tree"
        )
        self.range_tree.auto_expand = False
        self.range_tree.root.expand()
        self._add_ranges(self.range_tree.root, None)
        self.status = Static("", id="nvtx-status")
        self.status.display = False
        self.detail = Static("", id="nvtx-detail")
        self.search_line = FilterInput(self.history, placeholder="search ranges (a word or a regex)", id="search")
        self.search_line.display = False
        self.found, self.at = [], 0
        self.show(self.status, self.range_tree, self.detail, self.search_line)
        self.focus_if_active(self.range_tree)

    @staticmethod
    def _label(r: dict) -> Text:
        t = Text(f"{cut(r['Name'], NAME_WIDTH)}  ", style="bold" if r["Depth"] < 2 else "")
        n = r["GPU ops"]
        t.append(
            f"{fmt_ns(r['GPU (ns)'])}  {fmt_ns(r['CPU (ns)'])}  ×{r['Instances']:,}  "
            f"{n:,} GPU op{'' if n == 1 else 's'}  "
        )
        t.append(r["_bar"], style="cyan")
        return t

    def _kids(self, parent_id: int | None) -> tuple[int, int]:
        """The slice [lo, hi) of `rows` whose parent is `parent_id`."""
        key = -1 if parent_id is None else parent_id
        return (
            int(np.searchsorted(self.parents, key, side="left")),
            int(np.searchsorted(self.parents, key, side="right")),
        )

    def _add_ranges(self, node: TreeNode[dict], parent_id: int | None) -> None:
        """Add the ranges under `parent_id` below `node` (on first expansion: a deep tree is
        never built whole)."""
        lo, hi = self._kids(parent_id)
        if lo == hi:
            return
        # share of all ranges' GPU time
        assert self.data is not None  # nodes are added once the tree of `data` is made
        kids = self.data.paths[self.rows[lo:hi]].with_columns(bar(pl.col("GPU (ns)") / self.total_gpu).alias("_bar"))
        if "Path" not in kids.columns:  # read without the texts: each is made of its parent's
            kids = kids.with_columns(child_paths(node.data["Path"] if node.data is not None else None))
        ids = kids["path_id"].to_numpy()
        has_kids = np.searchsorted(self.parents, ids, side="right") > np.searchsorted(self.parents, ids, side="left")
        for r, more in zip(kids.iter_rows(named=True), has_kids.tolist()):
            node.add(self._label(r), data=r, allow_expand=more)

    def reveal(self, path_id: int) -> TreeNode[dict] | None:
        """Expand the ancestors of range path `path_id` and put the cursor on it."""
        if self.data is None or not hasattr(self, "range_tree"):
            return None
        paths = self.data.paths
        ids = paths["path_id"].to_numpy()  # ascending (parents before children)
        parent_of = paths["parent_id"]
        chain = []
        pid: int | None = path_id
        while pid is not None:
            chain.append(pid)
            at = int(np.searchsorted(ids, pid))
            pid = parent_of[at] if at < len(ids) and ids[at] == pid else None
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
        self.open_range(event.node)

    def open_range(self, node: TreeNode[dict] | None) -> None:
        """Kernels restricted to the ops this range's GPU time counts (launched while one of
        its instances was open), not a text filter: kernel rows never carry op-marker labels."""
        r = node.data if node is not None else None
        if not r or self.data is None:
            return
        idx = ops_in_windows(self.data.windows_of(r["path_id"]), self.data.timeline, r["path_id"])
        self.post_message(OpenKernels(scope=Scope(r["Path"], idx, back_to=self.view_id)))

    def action_open_range(self) -> None:
        if self.data is not None and hasattr(self, "range_tree"):
            self.open_range(self.range_tree.cursor_node)

    # -- search ------------------------------------------------------------------------------
    def action_search(self) -> None:
        if self.data is None or not hasattr(self, "range_tree"):
            return
        self.search_line.display = True
        self.search_line.open("")
        self.search_line.focus()

    @on(Input.Submitted, "#search")
    def _searched(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.search_line.display = False
        self.range_tree.focus()
        if not text or self.data is None:
            return
        if not self.history or self.history[-1] != text:
            self.history.append(text)
        try:
            re.compile(text)
            hit = pl.col("Name").str.contains("(?i)" + text)
        except (re.error, pl.exceptions.PolarsError):
            hit = pl.col("Name").str.to_lowercase().str.contains(text.lower(), literal=True)
        try:
            found = self.data.paths.filter(hit).sort(["GPU (ns)", "path_id"], descending=[True, False])
        except pl.exceptions.PolarsError:
            found = self.data.paths.filter(pl.col("Name").str.to_lowercase().str.contains(text.lower(), literal=True))
        self.found, self.at = found["path_id"].to_list(), 0
        self.search_text = text
        if not self.found:
            self.status.update(Text(f"no range matches {text!r}", style="bold yellow"))
            self.status.display = True
            return
        self.go_to_match()

    def action_search_next(self, step: int) -> None:
        if self.found:
            self.at = (self.at + step) % len(self.found)
            self.go_to_match()

    def go_to_match(self) -> None:
        self.reveal(self.found[self.at])
        self.status.update(
            Text(
                f"{self.search_text!r}: match {self.at + 1} of {len(self.found)} "
                f"(most GPU time first; n/N: next/previous, esc: done)",
                style="bold",
            )
        )
        self.status.display = True

    def back(self) -> bool:
        if self.data is None or not hasattr(self, "range_tree"):
            return False
        if self.search_line.display:
            self.search_line.display = False
            self.range_tree.focus()
            return True
        if self.status.display:
            self.status.display = False
            self.found = []
            return True
        return False

    # -- copy --------------------------------------------------------------------------------
    def shown(self) -> Shown:
        """The ranges as shown: the expanded part of the tree, in its order, indented."""
        if self.data is None or not hasattr(self, "range_tree"):
            return Shown(pl.DataFrame(), "nvtx tree")
        rows: list[dict] = []

        def walk(node: TreeNode[dict], depth: int) -> None:
            for child in node.children:
                r = child.data
                if r is None:
                    continue
                rows.append(
                    {
                        "Range": "  " * depth + r["Name"],
                        "GPU (ns)": r["GPU (ns)"],
                        "CPU (ns)": r["CPU (ns)"],
                        "Instances": r["Instances"],
                        "GPU ops": r["GPU ops"],
                        "Path": r["Path"],
                    }
                )
                if child.is_expanded:
                    walk(child, depth + 1)

        walk(self.range_tree.root, 0)
        schema = {
            "Range": pl.String,
            "GPU (ns)": pl.Int64,
            "CPU (ns)": pl.Int64,
            "Instances": pl.Int64,
            "GPU ops": pl.Int64,
            "Path": pl.String,
        }
        return Shown(pl.DataFrame(rows, schema=schema), "nvtx tree as shown")

    def action_show_on_timeline(self) -> None:
        tree = getattr(self, "range_tree", None)
        node = tree.cursor_node if tree is not None else None
        r = node.data if node is not None else None
        if not r or r.get("_first_start") is None:
            return
        self.post_message(
            ShowOnTimeline(start=r["_first_start"], end=r["_first_end"], thread=r["_first_tid"], depth=r["Depth"])
        )
