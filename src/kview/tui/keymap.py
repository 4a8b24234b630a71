"""Keys as data: every binding once, with its help text; the app, the views and the help
screen all read this table."""
from __future__ import annotations

GLOBAL_KEYS = [
    ("1", "show_view('overview')", "Overview"), ("2", "show_view('kernels')", "Kernels"),
    ("3", "show_view('nvtx')", "NVTX"), ("4", "show_view('layers')", "Layers"), ("5", "show_view('compare')", "Compare"),
    ("y", "copy('md')", "Copy table as Markdown"), ("Y", "copy('tsv')", "Copy table as TSV"),
    ("e", "export", "Export table to a file"), ("question_mark", "help", "Help: every key of this view"),
    ("ctrl+p", "command_palette", "Command palette"), ("escape", "back", "Step back"), ("q", "quit", "Quit"),
]

VIEW_KEYS = {
    "overview": [],
    "kernels": [
        ("slash", "open_filter", "Filter (dir:, layer:, op:, cat:, range:, dur>50us, -term, regex)"),
        ("t", "toggle_rows", "Toggle summary / per-kernel rows"),
        ("g", "cycle_grouping", "Cycle grouping: name, short name, category, layer, op, direction, range"),
        ("s", "sort(False)", "Sort by the column under the cursor, ascending"),
        ("S", "sort(True)", "Sort by the column under the cursor, descending"),
        ("enter", "", "Show the instances of the group under the cursor"),
    ],
    "nvtx": [
        ("enter", "", "Open Kernels filtered to the range"),
        ("space", "", "Expand / collapse"), ("shift+left", "", "Go to the parent range"),
    ],
    "layers": [("o", "toggle_order", "Order by layer index / by time")],
    "compare": [("s", "sort(False)", "Sort ascending"), ("S", "sort(True)", "Sort descending")],
}

KEY_LABELS = {"question_mark": "?", "slash": "/", "escape": "esc"}


def help_rows(view: str) -> list[tuple[str, str]]:
    rows = [(KEY_LABELS.get(k, k), text) for k, _, text in VIEW_KEYS.get(view, [])]
    rows += [("←/→ ↑/↓ PgUp/PgDn", "Move the cursor")] if view in ("kernels", "layers", "compare") else []
    rows += [(KEY_LABELS.get(k, k), text) for k, _, text in GLOBAL_KEYS]
    return rows
