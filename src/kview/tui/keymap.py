"""Keys as data: every binding of the app, its views, the table and the dialogs once, with its
help text. Widgets take their BINDINGS from here and the help screen lists the same rows, so a
key and its description cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names; a comma separates alternatives ("up,k")
    action: str  # the action it runs; "" = handled by a widget itself, listed for help only
    help: str
    show: bool = False  # shown in the footer


GLOBAL_KEYS = [
    Key("1", "show_view('overview')", "Overview"),
    Key("2", "show_view('kernels')", "Kernels"),
    Key("3", "show_view('nvtx')", "NVTX"),
    Key("4", "show_view('layers')", "Layers"),
    Key("5", "show_view('compare')", "Compare"),
    Key("y", "copy('md')", "Copy table as Markdown", show=True),
    Key("Y", "copy('tsv')", "Copy table as TSV"),
    Key("e", "export", "Export table to a file"),
    Key("question_mark", "help", "Help: every key of this view", show=True),
    Key("ctrl+p", "", "Command palette"),
    Key("escape", "step_back", "Step back"),
    Key("q", "quit", "Quit", show=True),
]

VIEW_KEYS = {
    "overview": [],
    "kernels": [
        Key("slash", "open_filter", "Filter (dir:, layer:, op:, cat:, range:, dur>50us, -term, regex)"),
        Key("t", "toggle_rows", "Toggle summary / per-kernel rows"),
        Key("g", "cycle_grouping", "Cycle grouping: name, short name, category, layer, op, direction, range"),
        Key("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        Key("S", "sort(True)", "Sort by the column under the cursor, descending"),
        Key("enter", "", "Show the instances of the group under the cursor"),
    ],
    "nvtx": [
        Key("enter", "", "Open Kernels filtered to the range"),
        Key("space", "", "Expand / collapse"),
        Key("shift+left", "", "Go to the parent range"),
    ],
    "layers": [Key("o", "toggle_order", "Order by layer index / by time")],
    "compare": [Key("s", "sort(False)", "Sort ascending"), Key("S", "sort(True)", "Sort descending")],
}

# the Line-API table (FrameTable): vi keys beside the arrows
TABLE_KEYS = [
    Key("up,k", "cursor(-1)", "Up"),
    Key("down,j", "cursor(1)", "Down"),
    Key("pageup", "page(-1)", "Page up"),
    Key("pagedown", "page(1)", "Page down"),
    Key("home", "jump(0)", "Top"),
    Key("end", "jump(-1)", "Bottom"),
    Key("left,h", "column(-1)", "Column left"),
    Key("right,l", "column(1)", "Column right"),
    Key("enter", "select", "Open"),
]
FILTER_KEYS = [Key("up", "history(-1)", "Previous filter"), Key("down", "history(1)", "Next filter")]
HELP_SCREEN_KEYS = [Key("escape,q,question_mark", "dismiss", "Close")]
EXPORT_SCREEN_KEYS = [Key("escape", "dismiss('')", "Cancel")]

# views whose table moves with the cursor keys (the help screen says so)
TABLE_VIEWS = ("kernels", "layers", "compare")
KEY_LABELS = {"question_mark": "?", "slash": "/", "escape": "esc"}


def bindings(keys: list[Key]) -> list[BindingType]:
    """Textual bindings of the keys that run an action."""
    return [Binding(k.keys, k.action, k.help, show=k.show) for k in keys if k.action]


def help_rows(view: str) -> list[tuple[str, str]]:
    rows = [(KEY_LABELS.get(k.keys, k.keys), k.help) for k in VIEW_KEYS.get(view, [])]
    rows += [("←/→ ↑/↓ PgUp/PgDn", "Move the cursor")] if view in TABLE_VIEWS else []
    rows += [(KEY_LABELS.get(k.keys, k.keys), k.help) for k in GLOBAL_KEYS]
    return rows
