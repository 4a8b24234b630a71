"""How a number, a duration, a size, a share and a name are written: one notation for every
layer (analysis's findings and notes, the documents, the renderers, the explorer), so no two
places can write the same quantity differently. Numbers: a data format's cell is polars' own
text of the value (shortest round-trip floats), nsys's fixed decimals where a report has them
(`fixed`); a terminal table groups its digits (`grouped`); the explorer's cells round floats to
a few decimals and group them (`fmt_cell`); durations and sizes in words (`fmt_ns`,
`human_bytes`, `human_ms`). Names: kernel names lose their template arguments (`short_names`),
several that would then read the same keep what tells them apart (`distinct_short_names`), and a
cell too narrow for its text keeps the end that says most (`cut`, `distinct_cuts`).

Bars are polars expressions over a whole column (no loop over rows), drawn in block characters
that every terminal font has: a share bar at 1/8-cell resolution, and a stacked bar whose
segments (forward, backward, ...) take different shades of whole cells.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a bar or a short name is made: a table of text needs no polars
    import polars as pl

FULL = "█"
EIGHTHS = ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")  # 0/8 .. 7/8 of a cell
SHADES = "█▓▒░"  # the segments of a stacked bar, in order


def fmt_ns(ns: float | int | None) -> str:
    """A duration in the unit a person reads: `1.5 ms`, `312 µs`, `2.04 s`, `870 ns`."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) / scale < 100 else f"{ns / scale:,.1f} {unit}"
    return f"{ns:.0f} ns"


def fmt_cell(v, decimals: int = 1) -> str:
    """A cell of the explorer's tables: numbers with thousands separators (floats to `decimals`),
    booleans as the data formats write them, nothing for a missing value."""
    if v is None:
        return ""
    if isinstance(v, bool):  # as the data formats write it
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:,.{decimals}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def grouped(text: str) -> str:
    """A number's text with thousands separators (`1234567.5` -> `1,234,567.5`), as nsys's
    console tables show numbers; text that is no number (`nan`, `inf`) as it is."""
    neg = text.startswith("-")
    text = text[1:] if neg else text
    whole, dot, frac = text.partition(".")
    if whole.isdigit():
        whole = f"{int(whole):,}"
    return ("-" if neg else "") + whole + dot + frac


def fixed(values: list, decimals: int) -> list[str | None]:
    """Numbers as text with `decimals` decimals, as nsys prints them (None stays None)."""
    return [None if v is None else f"{v:.{decimals}f}" for v in values]


def human_bytes(n: float) -> str:
    """A size in the decimal unit a person reads: `1.50 GB`, `312.00 kB`, `870 B`."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} B"


def exact_bytes(n: int) -> str:
    """A size in words and to the byte: `1.50 GB (1,500,000,000 B)`."""
    return f"{human_bytes(n)} ({n:,} B)"


def binary_bytes(n: int) -> str:
    """A size in binary units, as memory limits are given: `8.0 GiB`, `512.0 MiB`, `100 B`."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def human_ms(ns: float, decimals: int = 1) -> str:
    """A time in ms with thousands separators: `1,234.5 ms` (`decimals` 3: to the µs)."""
    return f"{ns / 1e6:,.{decimals}f} ms"


def bar(frac: pl.Expr, width: int = 10) -> pl.Expr:
    """A bar `frac` (0..1) of `width` cells long, rounded to the nearest 1/8 cell; empty for a
    missing or undefined fraction (0/0)."""
    import polars as pl

    cells = (frac.fill_nan(0).fill_null(0) * width * 8).round(0).cast(pl.Int64)
    return pl.concat_str(
        [
            pl.lit(FULL).repeat_by((cells // 8).cast(pl.UInt32)).list.join(""),
            (cells % 8).replace_strict(list(range(8)), list(EIGHTHS), default=""),
        ]
    )


def stacked_bar(parts: list[str], width: int = 30, glyphs: str = SHADES) -> pl.Expr:
    """One bar per row, a segment per column of `parts` drawn in its own shade, scaled so the
    row with the largest total fills `width` cells. Segment ends are rounded where they fall
    on the cumulative scale, so the segments of a row add up to its rounded total."""
    import polars as pl

    values = [pl.col(p).fill_null(0).cast(pl.Float64) for p in parts]
    top = pl.sum_horizontal(values).max()
    segments, used, drawn = [], None, pl.lit(0, dtype=pl.Int64)
    for i, v in enumerate(values):
        step = pl.when(top > 0).then(v / top * width).otherwise(0.0)
        used = step if used is None else used + step
        end = used.round(0).cast(pl.Int64)
        cells = (end - drawn).clip(lower_bound=0).cast(pl.UInt32)
        segments.append(pl.lit(glyphs[i % len(glyphs)]).repeat_by(cells).list.join(""))
        drawn = pl.max_horizontal(drawn, end)
    return pl.concat_str(segments) if segments else pl.lit("")


# -- names: one way to shorten a kernel name, a path or any text, for the CLI and the explorer --
# Kernel names keep their start (`void at::native::vectorized_elementwise_kernel<…`) and, where
# two would then read the same, the place they differ; range paths keep their innermost end
# (`…> layer_3 > mlp`); a layer keeps its index and its end (`layer_3:…_sublayer`); any other
# text keeps its start. Numbers are never cut.
NAME_COLUMNS = frozenset({"Kernel", "Name", "Short name", "Next kernel"})
KEEP_END = frozenset({"NVTX Path", "Range", "Path"})
KEEP_ENDS = frozenset({"Layer"})
NAME_HEAD = 40  # what a cut kernel name keeps of its start, room permitting


def short_names(names: pl.Series) -> pl.Series:
    """`void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)` ->
    `at::native::vectorized_elementwise_kernel<…>`: template arguments and parameter lists
    elided. Computed once per distinct name. Kept in the frame cache by `timeline.gpu` and
    `documents.kernel_groups`: a change of these rules changes their versions too."""
    import polars as pl

    uniq = names.unique().drop_nulls()
    s = uniq.str.replace(r"^void ", "")
    for _ in range(8):  # innermost brackets first, depth by depth
        s = s.str.replace_all(r"<[^<>]*>", "\x01").str.replace_all(r"\([^()]*\)", "\x02")
    s = s.str.replace_all("\x02+$", "").str.replace_all("\x01", "<…>").str.replace_all("\x02", "(…)")
    mapping = pl.DataFrame({"full": uniq, "short": s})
    return (
        pl.DataFrame({"full": names})
        .join(mapping, on="full", how="left", maintain_order="left")["short"]
        .alias(names.name)
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
    that still read the same are numbered. Computed once per distinct name. Kept in the frame
    cache by `documents.kernel_groups`: a change of these rules changes its version too."""
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
