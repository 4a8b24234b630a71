"""The kernel context dialog (`c`, or enter on a per-kernel row): the launch call, the launch
latency, the NVTX ranges around the launch and the ops around the kernel on its stream."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kview.analysis.kernel_context import KernelContext
from kview.notation import distinct_short_names, fmt_ns
from kview.tui.keymap import HELP_SCREEN_KEYS, bindings


class ContextScreen(ModalScreen):
    BINDINGS = bindings(HELP_SCREEN_KEYS)

    def __init__(self, trace_name: str, ctx: KernelContext):
        super().__init__()
        self.trace_name, self.ctx = trace_name, ctx

    def compose(self) -> ComposeResult:
        k, launch = self.ctx.kernel, self.ctx.launch
        t = Text(f"Kernel {k['Idx']:,} of {self.trace_name}   (↑ ↓ scroll · esc closes)\n", style="bold")
        t.append(f"{k['Kernel']}\n\n")
        t.append("GPU   ", style="bold cyan")
        t.append(
            f"start {k['Start (ns)']:,} ns · {fmt_ns(k['Duration (ns)'])} · device {k['Device']} · "
            f"stream {k['Stream']} · grid {k['Grid']} · block {k['Block']} · {k['Category']}\n"
        )
        t.append("What  ", style="bold cyan")
        t.append(f"{k['Direction']} · layer {k['Layer']} · op {k['Op']} {k['Params']}\n")
        t.append("Range ", style="bold cyan")
        t.append(f"{k['NVTX Path']}   (the path its GPU time counts in)\n\n")
        t.append("Launch\n", style="bold")
        if launch is None:
            t.append("  no launch call recorded for this op (outside the trace's window)\n")
        else:
            thread = f"{launch['Thread']} (tid {launch['TID']})" if launch["Thread"] else f"tid {launch['TID']}"
            t.append(f"  {launch['API']} on thread {thread}\n")
            t.append(
                f"  CPU start {launch['CPU start (ns)']:,} ns, the call took "
                f"{fmt_ns(launch['CPU end (ns)'] - launch['CPU start (ns)'])}\n"
            )
            t.append("  launch latency (GPU start - API start) ", style="")
            t.append(f"{fmt_ns(launch['Launch latency (ns)'])}\n", style="bold")
        t.append("\nNVTX ranges open around the launch, outer to inner\n", style="bold")
        for depth, name in enumerate(self.ctx.ranges):
            t.append(f"  {'  ' * depth}{'> ' if depth else ''}{name}\n")
        if not self.ctx.ranges:
            t.append("  (none)\n")
        t.append(f"\nOn stream {k['Stream']}: the ops before and after it\n", style="bold")
        around = self.ctx.around.with_columns(distinct_short_names(self.ctx.around["Kernel"]))
        table = Table(expand=False, box=None, padding=(0, 1))
        for c in around.columns:
            table.add_column(
                c,
                justify="right" if around.schema[c].is_numeric() else "left",
                no_wrap=True,
                overflow="ellipsis",
                max_width=70,
            )
        for row in around.iter_rows(named=True):
            me = row["Idx"] == k["Idx"]
            table.add_row(
                *[("" if v is None else f"{v:,}" if isinstance(v, int) else str(v)) for v in row.values()],
                style="reverse" if me else None,
            )
        with VerticalScroll(id="context-scroll"):
            yield Static(t, id="context-text")
            yield Static(table, id="context-around")

    def on_mount(self) -> None:
        self.query_one("#context-scroll").focus()
