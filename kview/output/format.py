"""How headers and columns fit a table, one way for the CLI and the TUI (the cells themselves,
numbers and names, are written and shortened by kview.notation)."""

from __future__ import annotations

import re

# columns a narrow terminal leaves out first (the CLI's table; the explorer's Kernels view)
SECONDARY_COLUMNS = (
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
    "Count (%)",
    "TFLOP/s",
)


def header_lines(text: str, width: int) -> list[str]:
    """A header in `width` cells, wrapped between words, never cut inside one (a column is at
    least as wide as its header's longest word)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def longest_word(text: str) -> int:
    return max((len(w) for w in text.split(" ")), default=0)


def fit_header(text: str, width: int) -> str:
    """A column header in `width` cells, never cut inside a word: words are left out from the
    end, keeping a unit (`Total Time (ns)` -> `Total (ns)`), and a lone word is abbreviated
    with a point (`Dur. (ns)`). A header that is one long name (a trace in Compare) keeps its
    start and end (`lm-small…train_nsys`), so names that share a prefix stay apart."""
    if len(text) <= width:
        return text
    found = re.match(r"^(.*?)\s*(\([^()]*\))$", text)
    name, unit = (found[1], " " + found[2]) if found and found[1] else (text, "")
    words = name.split(" ")
    if len(words) == 1 and not unit:  # one name
        if width < 5:
            return text[:width]
        head = width // 2
        return text[:head] + "…" + text[len(text) - (width - 1 - head) :]
    if not unit and len(words[0]) <= 2 and width > len(words[0]) + 5:  # `Δ backward_pass`: a mark and a name
        return words[0] + " " + fit_header(" ".join(words[1:]), width - len(words[0]) - 1)
    if len(unit) >= width - 1:
        unit = ""
    room = width - len(unit)
    while len(words) > 1 and len(" ".join(words)) > room:
        words.pop()
    kept = " ".join(words)
    if len(kept) > room:
        kept = kept[: max(room - 1, 1)] + "."
    return (kept + unit)[:width]


def shrink_headers(
    widths: list[int], values: list[int], headers: list[str], numeric: list[bool], avail: int, long: int = 20
) -> None:
    """Narrow number columns under a long header (a trace name in compare), the widest first,
    down to their values, until the row (each column plus two cells of gap) fits `avail`:
    they give way before the text columns (range and kernel names) do. Short headers such as
    `Total Time (ns)` keep their width."""
    while sum(w + 2 for w in widths) > avail:
        cand = [i for i, n in enumerate(numeric) if n and len(headers[i]) > long and widths[i] > max(values[i], 10)]
        if not cand:
            return
        i = max(cand, key=lambda j: widths[j])
        widths[i] -= 1
