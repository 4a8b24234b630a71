"""How cells, headers and kernel names fit a table, one way for the CLI and the TUI (durations,
bars and short kernel names themselves: kview.notation)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kview.notation import short_names

if TYPE_CHECKING:  # imported where a short name is made: a table of text needs no polars
    import polars as pl

# -- one way to shorten a cell, for the terminal tables of the CLI and the explorer's --------------
# Kernel names keep their start (`void at::native::vectorized_elementwise_kernel<…`) and, where
# two would then read the same, the place they differ; range paths keep their innermost end
# (`…> layer_3 > mlp`); a layer keeps its index and its end (`layer_3:…_sublayer`); any other
# text keeps its start. Numbers are never cut.
NAME_COLUMNS = frozenset({"Kernel", "Name", "Short name", "Next kernel"})
KEEP_END = frozenset({"NVTX Path", "Range", "Path"})
KEEP_ENDS = frozenset({"Layer"})
NAME_HEAD = 40  # what a cut kernel name keeps of its start, room permitting
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


def cut_how(column: str) -> str:
    """Which end of `column`'s text a cut keeps: 'start', 'end' or 'ends'."""
    return "end" if column in KEEP_END else "ends" if column in KEEP_ENDS else "start"


def cut(text: str, width: int, keep: str | bool = "start") -> str:
    """`text` in `width` cells: its start and `…` (`keep` 'start'), `…` and its end ('end', or
    True), or its first `:` segment, `…` and its end ('ends': `layer_3:…ion_sublayer`)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    keep = "end" if keep is True else "start" if keep is False else keep
    if keep == "end":
        return "…" + text[len(text) - width + 1 :]
    if keep == "ends":
        first = text.find(":") + 1
        head = first if 0 < first <= (width - 1) * 2 // 3 else (width - 1) // 2
        return text[:head] + "…" + text[len(text) - (width - 1 - head) :]
    return text[: width - 1] + "…"


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def distinct_cuts(values: list[str], width: int) -> dict[str, str]:
    """`cut` of each name (its start kept), except that names whose cuts would read the same
    keep their start and then what tells them apart: the identifiers of their template
    arguments the others lack (`void at::native::vectorized_elementwise_…MulFunctor`), else
    the text where each parts from its nearest sibling. Names that still read the same differ
    only further on (the full name is in every copy and export)."""
    # clashes are settled group by group, each against what earlier groups chose: a fixed
    # order keeps the picture the same whatever order the values came in
    values = sorted(set(values))
    out = {v: cut(v, width) for v in values}
    groups: dict[str, list[str]] = {}
    for v in values:
        if len(v) > width:
            groups.setdefault(out[v], []).append(v)
    # the start a report reader recognizes first; a narrow column (the explorer's) keeps half
    head = NAME_HEAD if width > NAME_HEAD else max(4, width // 2)
    budget = width - head - 1
    if budget < 3:
        return out

    def shorten(tail: str) -> str:
        return tail if len(tail) <= budget else tail[: budget - 1] + "…"

    for same in groups.values():
        if len(same) < 2:
            continue
        others = {out[v] for v in values} - {out[same[0]]}
        words = {v: _words(v) for v in same}
        common = set.intersection(*(set(w) for w in words.values()))
        by_words = {v: v[:head] + "…" + shorten(", ".join(w for w in words[v] if w not in common)) for v in same}
        count: dict[str, int] = {}
        for t in by_words.values():
            count[t] = count.get(t, 0) + 1
        chosen = {}
        for j, v in enumerate(same):  # sorted: the nearest sibling is a neighbour
            if count[by_words[v]] == 1 and by_words[v] not in others:
                chosen[v] = by_words[v]
                continue
            p = max(_common(v, same[j - 1]) if j else 0, _common(v, same[j + 1]) if j + 1 < len(same) else 0)
            # from where it parts, with a little context before when there is room
            parted = v[:head] + "…" + shorten(v[max(head, p - min(4, budget // 4)) :])
            chosen[v] = parted if parted not in others else out[v]
        if len(set(chosen.values())) > 1:  # told apart better than by one shared cut
            out.update(chosen)
    return out


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


_QUALIFIED = re.compile(r"(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)")
_SYNTAX = frozenset(
    {
        "const",
        "void",
        "operator",
        "lambda",
        "instance",
        "unnamed",
        "unsigned",
        "signed",
        "long",
        "int",
        "T1",
        "T2",
        "T3",
        "struct",
        "class",
        "typename",
        "native",
        "detail",
        "TensorIteratorBase",
        "TensorIterator",
        "Scalar",
        "func_wrapper_t",
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
    }
)
# what names the work a template variant does: functors, kernels, ops, tile configurations
_STRONG = re.compile(r"(?i)(functor|kernel|_cuda|op|ops|metadata)$|^cutlass|^[A-Z][a-z]+[A-Z]")


def _words(name: str) -> list[str]:
    """The identifiers inside a kernel name's template arguments, last component of each
    qualified name, in order, once each: what tells template variants apart."""
    s = name.removeprefix("void ")
    inside = s[s.find("<") + 1 :] if "<" in s else ""
    out: list[str] = []
    for m in _QUALIFIED.finditer(inside):
        w = m.group(1)
        if w not in _SYNTAX and not w.isdigit() and w not in out:
            out.append(w)
    return out


def _variant(short: str, words: list[str], common: set[str], keep: int, strong_only: bool) -> str:
    """`short` with up to `keep` of `words` the other variants lack (functors and kernels
    first when `strong_only`): `…elementwise_kernel<…MulFunctor…>`."""
    own = [w for w in words if w not in common and (_STRONG.search(w) or not strong_only)][:keep]
    return f"{short.removesuffix('<…>')}<…{', '.join(own)}…>" if own else short


def distinct_short_names(names: pl.Series, keep: int = 3) -> pl.Series:
    """`short_names`, but where several different kernels would read the same
    (`at::native::vectorized_elementwise_kernel<…>` for a dozen functors), each keeps the
    identifiers of its template arguments that the others lack, functors and kernels first, up
    to `keep` of them: `…vectorized_elementwise_kernel<…BinaryFunctor, MulFunctor…>`. Names
    that still read the same are numbered. Computed once per distinct name."""
    import polars as pl

    uniq = names.unique().drop_nulls().sort()
    frame = pl.DataFrame({"full": uniq, "short": short_names(uniq)})
    mapping = dict(zip(frame["full"].to_list(), frame["short"].to_list()))
    for (sh,), group in frame.filter(pl.col("short").is_duplicated()).group_by("short", maintain_order=True):
        fulls = group["full"].to_list()
        words = {f: _words(f) for f in fulls}
        common = set.intersection(*(set(w) for w in words.values()))
        shown = {f: _variant(str(sh), words[f], common, keep, True) for f in fulls}
        if len(set(shown.values())) < len(fulls):
            shown = {f: _variant(str(sh), words[f], common, keep, False) for f in fulls}
        count: dict[str, int] = {}
        for f in fulls:
            count[shown[f]] = count.get(shown[f], 0) + 1
        seen: dict[str, int] = {}
        for f in fulls:  # the same words still: numbered in name order
            if count[shown[f]] > 1:
                seen[shown[f]] = seen.get(shown[f], 0) + 1
                mapping[f] = f"{shown[f]} #{seen[shown[f]]}"
            else:
                mapping[f] = shown[f]
    table = pl.DataFrame(
        {"full": list(mapping), "short": list(mapping.values())}, schema={"full": pl.String, "short": pl.String}
    )
    return (
        pl.DataFrame({"full": names})
        .join(table, on="full", how="left", maintain_order="left")["short"]
        .alias(names.name)
    )


def shown_kernel_names(frame: pl.DataFrame, column: str, width: int) -> pl.DataFrame:
    """`frame` with the kernel names of `column` as a table `width` wide shows them: template
    arguments elided (distinct_short_names), then cut to `width` (distinct_cuts), two different
    kernels never reading the same."""
    short = distinct_short_names(frame[column])
    cuts = distinct_cuts(short.drop_nulls().to_list(), width)
    return frame.with_columns(short.replace_strict(cuts, default=short).alias(column))
