"""Keys as data: every binding of the app, its views, the table and the dialogs once, with the
word the footer shows and the sentence the help screen and the command palette show. Widgets
take their BINDINGS from here, the help screen lists the same rows and the palette runs the
same actions, so a key, its description and its palette entry cannot drift apart.

A new view is its module in tui/views/ and one `register` line in views/__init__.py; its keys go here,
under its view id (the palette and the help screen read them).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names; a comma separates alternatives ("up,k")
    action: str  # the action it runs; "" = handled by a widget itself, listed for help only
    help: str  # the sentence in the help screen and the command palette
    short: str = ""  # the word in the footer; shown there when set


GLOBAL_KEYS = [
    Key("T", "pick_trace", "Switch trace: pick which open trace the views show", "trace"),
    Key("right_square_bracket", "next_trace(1)", "Next trace"),
    Key("left_square_bracket", "next_trace(-1)", "Previous trace"),
    Key("u", "cycle_unit", "Durations in ns, µs or ms"),
    Key(
        "y",
        "copy('md')",
        "Copy what is shown as Markdown (the table, the focused section, the Timeline picture)",
        "copy",
    ),
    Key("Y", "copy('tsv')", "Copy what is shown as TSV (the Timeline: its numbers per cell)"),
    Key("e", "export", "Export what is shown to a file (md, csv, tsv, json)"),
    Key("question_mark", "help", "Help: every key of this view", "keys"),
    Key("ctrl+p", "", "Command palette: every action by name"),
    Key("escape", "step_back", "Step back (leave a filter, a drill-in, a jump)"),
    Key("q", "quit", "Quit", "quit"),
]

VIEW_KEYS = {
    "overview": [
        Key("slash", "search", "Search the overview", "search"),
        Key("n", "search_next(1)", "Next match"),
        Key("N", "search_next(-1)", "Previous match"),
        Key("tab", "", "Next section (y copies the focused one)"),
        Key("up,down,pageup,pagedown,home,end", "", "Scroll"),
    ],
    "kernels": [
        Key(
            "slash", "open_filter", "Filter kernels (dir:, layer:, op:, cat:, range:, dur>50us, -term, regex)", "filter"
        ),
        Key("t", "toggle_rows", "Toggle summary / per-kernel rows", "rows"),
        Key("g", "cycle_grouping", "Cycle grouping: name, short name, category, layer, op, direction, range", "group"),
        Key("F", "frequency", "Frequency of the column under the cursor: count, time, share per value", "freq"),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
        Key("c", "context", "Kernel context: launch call, latency, NVTX path, kernels around it on its stream"),
        Key("enter", "open_row", "Open: a group's kernels, a kernel's context, a value's kernels", "open"),
        Key("J", "show_on_timeline", "Jump to the kernel under the cursor on the Timeline (a group: its longest)"),
    ],
    "nvtx": [
        Key("enter", "open_range", "Kernels of the range: exactly the ops its GPU time counts", "kernels"),
        Key("slash", "search", "Search ranges (in the whole tree, collapsed parts too)", "search"),
        Key("n", "search_next(1)", "Next match"),
        Key("N", "search_next(-1)", "Previous match"),
        Key("space", "", "Expand / collapse"),
        Key("shift+left", "", "Go to the parent range"),
        Key("J", "show_on_timeline", "Jump to the range's first instance on the Timeline"),
    ],
    "timeline": [
        Key("left,h", "pan(-1)", "Pan left (an eighth of the view)"),
        Key("right,l", "pan(1)", "Pan right (an eighth of the view)"),
        Key("shift+left,comma", "cell(-1)", "Cursor one cell left"),
        Key("shift+right,full_stop", "cell(1)", "Cursor one cell right"),
        Key("plus,equals_sign", "zoom(2.0)", "Zoom in about the cursor (also the mouse wheel)", "zoom"),
        Key("minus", "zoom(0.5)", "Zoom out about the cursor"),
        Key("home", "edge(0)", "Go to the start of the trace"),
        Key("end", "edge(1)", "Go to the end of the trace"),
        Key("f", "fit", "Fit the whole trace", "fit"),
        Key("z", "zoom_op", "Zoom to the kernel or range under the cursor"),
        Key("up,k", "row(-1)", "Row up"),
        Key("down,j", "row(1)", "Row down"),
        Key("pageup", "page(-1)", "Page up"),
        Key("pagedown", "page(1)", "Page down"),
        Key("greater_than_sign", "depth(1)", "Show one more NVTX depth on every thread"),
        Key("less_than_sign", "depth(-1)", "Show one NVTX depth less"),
        Key("space", "expand", "Expand / collapse every NVTX depth of the thread under the cursor"),
        Key("enter", "open", "Open the kernel (or user range) under the cursor in Kernels", "open"),
        Key("slash", "open_filter", "Highlight GPU ops matching a filter (the Kernels filter language)", "filter"),
        Key("m", "mark", "Set a mark; the status line shows mark → cursor", "mark"),
        Key(
            "E",
            "export_window",
            "Export the shown window (only the highlighted GPU ops, with a highlight) as Chrome trace JSON for "
            "ui.perfetto.dev or chrome://tracing, as kview export",
        ),
    ],
    "layers": [
        Key("o", "toggle_order", "Order by layer index / by time", "order"),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
    ],
    "memory": [
        Key(
            "t",
            "cycle_table",
            "Next table: live at the peak by call site (a trace's own events: by op and layer), by size; largest "
            "allocations; per phase; per step",
            "table",
        ),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
    ],
    "compare": [
        Key("b", "cycle_by", "Compare by range, layer, category or kernel (kview compare --by)", "by"),
        Key("m", "cycle_metric", "GPU or CPU time (kview compare --metric; CPU for ranges only)", "metric"),
        Key(
            "r",
            "toggle_ranks",
            "Columns: the traces (or phases) / the ranks of the run (kview compare --ranks)",
            "ranks",
        ),
        Key(
            "g",
            "toggle_gate",
            "Regression gate: the last trace against the first, every scope at 5% (kview diff A B --gate 5)",
            "gate",
        ),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
    ],
    "launches": [
        Key(
            "t",
            "cycle_table",
            "Next table: idle gaps, launch cost and delay by kernel and op, queue length, critical path",
            "table",
        ),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
    ],
    "efficiency": [
        Key(
            "t",
            "cycle_table",
            "Next table: by step, layer, category, kernel; FP32 GEMMs that could use tensor cores; the GPU's peaks",
            "table",
        ),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending", "sort"),
    ],
    "ranks": [
        Key("t", "cycle_table", "Lower table: iterations, stragglers by iteration, collectives", "table"),
        Key("tab", "", "Move between the ranks and the lower table (y copies the focused one)"),
        Key("s", "sort(False)", "Sort the focused table by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort the focused table by the column under the cursor, descending", "sort"),
    ],
}

# the Line-API table (FrameTable): vi keys beside the arrows, VisiData's column keys
TABLE_KEYS = [
    Key("up,k", "cursor(-1)", "Up"),
    Key("down,j", "cursor(1)", "Down"),
    Key("pageup", "page(-1)", "Page up"),
    Key("pagedown", "page(1)", "Page down"),
    Key("home", "jump(0)", "Top"),
    Key("end", "jump(-1)", "Bottom"),
    Key("left,h", "column(-1)", "Column left"),
    Key("right,l", "column(1)", "Column right"),
    Key("minus", "hide_column", "Hide the column under the cursor"),
    Key("equals_sign", "show_columns", "Show every column again, at its own width"),
    Key("greater_than_sign", "widen(4)", "Widen the column under the cursor"),
    Key("less_than_sign", "widen(-4)", "Narrow the column under the cursor"),
    Key("underscore", "full_width", "Show the column under the cursor full width (again: fit)"),
    Key("enter", "select", "Open"),
]
FILTER_KEYS = [Key("up", "history(-1)", "Previous filter"), Key("down", "history(1)", "Next filter")]
SEARCH_KEYS = [Key("up", "history(-1)", "Previous search"), Key("down", "history(1)", "Next search")]
HELP_SCREEN_KEYS = [Key("escape,q,question_mark", "dismiss", "Close")]
PICK_SCREEN_KEYS = [
    Key("escape", "cancel", "Cancel"),
    # the number shown before a choice picks it in one key (and cannot race the list's cursor)
    *(Key(str(n), f"choose({n - 1})", f"Choose option {n}") for n in range(1, 10)),
]

# views whose table moves with the cursor keys (the help screen lists the table's keys there)
TABLE_VIEWS = ("kernels", "layers", "compare", "ranks", "memory", "launches", "efficiency")
KEY_LABELS = {
    "question_mark": "?",
    "slash": "/",
    "escape": "esc",
    "minus": "-",
    "equals_sign": "=",
    "greater_than_sign": ">",
    "less_than_sign": "<",
    "underscore": "_",
    "right_square_bracket": "]",
    "left_square_bracket": "[",
    "up,down,pageup,pagedown,home,end": "↑ ↓ PgUp PgDn Home End",
    "up,k": "↑ k",
    "down,j": "↓ j",
    "left,h": "← h",
    "right,l": "→ l",
    "shift+left": "shift+←",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "plus,equals_sign": "+ =",
    "shift+left,comma": "shift+← ,",
    "shift+right,full_stop": "shift+→ .",
}


def bindings(keys: list[Key]) -> list[BindingType]:
    """Textual bindings of the keys that run an action (the footer shows those with a word)."""
    return [Binding(k.keys, k.action, k.short or k.help, show=bool(k.short)) for k in keys if k.action]


def label(k: Key) -> str:
    return KEY_LABELS.get(k.keys, k.keys)


TRACE_ACTIONS = ("pick_trace", "next_trace")  # keys that exist only with several traces open


def help_rows(view: str, several_traces: bool = False) -> list[tuple[str, str]]:
    """(key, what it does) for the view in front, then its table, then the keys of every view
    (the trace keys only when several traces are open)."""
    rows = [(label(k), k.help) for k in VIEW_KEYS.get(view, [])]
    if view in TABLE_VIEWS:
        rows += [(label(k), k.help) for k in TABLE_KEYS if k.keys != "enter"]
    rows += [(label(k), k.help) for k in GLOBAL_KEYS if several_traces or not k.action.startswith(TRACE_ACTIONS)]
    return rows
