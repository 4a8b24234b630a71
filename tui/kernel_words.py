"""What the Kernels view's filter line completes, and the widths of its columns, of every
attributed kernel: a table of its own (`kernel_words`), which a large trace's worker process
makes with the attribution (kview.tui.prepare), so the explorer need not read every kernel's
texts for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis.attribution import attribute
from kview.derived import derived, frames
from kview.documents.kernels import kernel_groups

if TYPE_CHECKING:
    from kview.trace import Trace

# the filter line suggests at most this many kernel names
SUGGESTED_NAMES = 5000


def field_words(table: pl.DataFrame) -> tuple[str, ...]:
    """`field:value` for the values the filter line completes (a value with spaces quoted)."""
    words: list[str] = []
    for field, col in FIELDS:
        values = table[col].unique().drop_nulls().sort().head(SUGGESTED_NAMES).to_list()
        words += [f'{field}:"{v}"' if " " in v else f"{field}:{v}" for v in values if v and v != "-"]
    return tuple(words)


# the filter line's fields whose values it completes, and the attributed table's column of each
FIELDS = (("dir", "Direction"), ("cat", "Category"), ("layer", "Layer"), ("op", "Op"), ("range", "_range"))


@derived(key="explorer.kernel_words", version="1", persist=True, codec=frames("widths", "words"))
def kernel_words(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What the Kernels view's filter line completes and its columns' widths, of every
    attributed kernel (kview.tui.loading.attributed, made here again: a worker making this
    holds no second reference to the table it lets go next): (the widest text of each text
    column, one row; the words: the kernel names first, field "", then `field:value` of each
    field). Kept in the frame cache: a second look does not scan every kernel's texts again."""
    table = attribute(trace).hstack(kernel_groups(trace)[0].get_columns())
    text = [c for c, t in table.schema.items() if t == pl.String]
    widths = table.select([pl.col(c).str.len_chars().max().cast(pl.Int64) for c in text])
    names = sorted(table["Kernel"].unique().drop_nulls().to_list())[:SUGGESTED_NAMES]
    words = pl.DataFrame(
        {"field": [""] * len(names), "word": names}, schema={"field": pl.String, "word": pl.String}
    ).vstack(
        pl.DataFrame(
            {"field": "filter", "word": list(field_words(table))}, schema={"field": pl.String, "word": pl.String}
        )
    )
    return widths, words


@derived(key="explorer.kernel_summary", version="1", persist=True)
def kernel_summary(trace: Trace) -> pl.DataFrame:
    """The rows of cuda_gpu_kern_sum, the Kernels view's first table, of a trace that has a
    kernel table. Kept in the frame cache: a reopen shows them without reading every
    kernel's start, end and name again (1.1M kernels on dense_x25). Its version changes with
    cuda_gpu_kern_sum's rules (the cache keys a table by its own version, not by the code it calls)."""
    # deferred as the view's document defers it: the explorer's first screen waits for none of it
    from kview.reports import cuda_gpu_kern_sum

    return cuda_gpu_kern_sum(trace).frame
