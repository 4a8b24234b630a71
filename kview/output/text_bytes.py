"""What a large text column's bytes hold and where they lie, read from polars' own buffers.

A polars text column is Arrow string views: a value of 12 bytes or fewer lies inside its 16-byte
view, a longer one in one of the column's data buffers. Those buffers hold every longer value and
may hold more (a sorted or filtered column shares the buffers it was taken from), so a byte found
in neither the buffers nor the short values is in no value. Read in memory order this is a few
times cheaper than a test of each value in row order where the rows were sorted after the text
was made (5.6M distinct NVTX names by total time: 0.4 against 5 CPU s): each value's bytes then
lie far from the last one's.

Only columns of `MIN_ROWS` rows or more are read this way (numpy and pyarrow load with it); for
the rest every function answers "may" (`lacks` False, `scattered` False) and callers test the
values as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np

MIN_ROWS = 1 << 16
CHUNK = 1 << 20  # bytes compared at a time: the comparisons' masks stay in cache
INLINE = 12  # the longest value kept inside its view
# buffers holding more than this many times the bytes of the values pointing into them are
# mostly other columns' text: testing the values themselves is cheaper
SPARE = 4
CACHED = 1 << 26  # text smaller than this stays in cache whatever order it is read in
SAMPLE = 1 << 16  # views looked at for the order of a column's bytes


def _views(texts: pl.Series) -> list[tuple[np.ndarray, np.ndarray, list[np.ndarray]]] | None:
    """Each chunk of `texts` as (views as int32 words [n, 4], views as bytes [n, 16], its data
    buffers as bytes), no copy; None for a column too small to read this way."""
    if texts.dtype != pl.String or texts.len() < MIN_ROWS:
        return None
    import numpy as np  # deferred: only a large column is read this way

    arrow = texts.to_arrow(compat_level=pl.CompatLevel.newest())
    chunks = getattr(arrow, "chunks", [arrow])
    out = []
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        buffers = chunk.buffers()
        if str(chunk.type) != "string_view" or buffers[1] is None:
            return None
        first, n = chunk.offset, len(chunk)
        raw = np.frombuffer(buffers[1], dtype=np.uint8, count=16 * (first + n)).reshape(-1, 16)[first:]
        words = np.frombuffer(buffers[1], dtype="<i4", count=4 * (first + n)).reshape(-1, 4)[first:]
        data = [np.frombuffer(b, dtype=np.uint8) for b in buffers[2:] if b is not None and b.size]
        out.append((words, raw, data))
    return out


_Spec = tuple["np.ndarray", bytes, bool]  # (bytes < 0x20, bytes >= 0x20, C1) of one set of characters


def _holds(data: np.ndarray, at: int, specs: list[_Spec], found: list[bool]) -> list[bool]:
    """Which specs `data[at : at + CHUNK]` may hold: spec i's bytes `low` (< 0x20) or `high`, or
    (its `c1`) a C1 character (UTF-8 C2 80..C2 9F); specs `found` already (by any chunk) are not
    looked for again."""
    import numpy as np

    mine = [False] * len(specs)
    x = data[at : at + CHUNK]
    if not x.size:  # a slice of views without a short value
        return mine
    # the chunk's least and greatest byte first (one pass each, no mask), once for every
    # spec: a byte outside them is not compared for (text without a control character,
    # ASCII text without C1)
    least, most = int(x.min()), int(x.max())
    control = None
    for i, (low, high, c1) in enumerate(specs):
        if found[i]:
            continue
        if low.size and least < 0x20:
            control = x[x < 0x20] if control is None else control
            if np.isin(control, low).any():
                mine[i] = True
                continue
        if any((x == b).any() for b in high if least <= b <= most):
            mine[i] = True
            continue
        if c1 and most >= 0xC2:
            second = np.flatnonzero(x == 0xC2) + (at + 1)
            if second.size:
                if second[-1] >= data.size:  # a lead byte last: its pair is not here to look at
                    mine[i] = True
                    continue
                follow = data[second]
                if ((follow >= 0x80) & (follow <= 0x9F)).any():
                    mine[i] = True
    return mine


def lacks(texts: pl.Series, chars: str, c1: bool = False) -> bool:
    """True when no value of `texts` holds one of the ASCII characters `chars` nor (`c1`) a C1
    control character (U+0080..U+009F); False when one may (or the column is not read this way)."""
    return lacks_each(texts, [(chars, c1)])[0]


def lacks_each(texts: pl.Series, wanted: list[tuple[str, bool]]) -> list[bool]:
    """`lacks(texts, chars, c1)` for each (chars, c1) of `wanted`, the column's bytes looked at
    once for all of them (a writer asks for control characters and for its own special ones)."""
    if texts.dtype != pl.String or texts.len() < MIN_ROWS:
        return [False] * len(wanted)
    codes = [chars.encode("ascii") for chars, _ in wanted]
    if repeats(texts):
        # a few texts over every row (a kernel's name, its op, its grid): those few looked at,
        # where reading each row's view costs 3-8x as much (1.3M rows: 0.01-0.02 against 0.09 s)
        distinct = texts.unique()
        answers = []
        for code, (_, c1) in zip(codes, wanted):
            pattern = "".join(f"\\x{{{b:02x}}}" for b in code) + ("\\x{80}-\\x{9f}" if c1 else "")
            answers.append(not pattern or not distinct.str.contains(f"[{pattern}]").any())
        return answers
    views = _views(texts)
    if views is None:
        return [False] * len(wanted)
    import numpy as np

    specs: list[_Spec] = [
        (
            np.array([b for b in code if b < 0x20], dtype=np.uint8),
            bytes(b for b in code if b >= 0x20),
            c1,
        )
        for code, (_, c1) in zip(codes, wanted)
    ]
    # (bytes, where in them a chunk starts) of the buffers; (views, their lengths, first) of
    # the short values, a slice of views at a time (their masks stay small)
    pieces: list[tuple[np.ndarray, int] | tuple[np.ndarray, np.ndarray, int]] = []
    for words, raw, data in views:
        lengths = words[:, 0]
        long = lengths > INLINE
        referenced = int(lengths[long].sum(dtype=np.int64))
        if sum(d.size for d in data) > SPARE * referenced + CHUNK:
            return [False] * len(wanted)
        pieces += [(d, at) for d in data for at in range(0, d.size, CHUNK)]
        pieces += [(raw, lengths, at) for at in range(0, len(raw), CHUNK // 16)]
    found = [False] * len(wanted)

    def look(piece: tuple[np.ndarray, int] | tuple[np.ndarray, np.ndarray, int]) -> None:
        if all(found):  # a spec found by one chunk is no longer looked for by the next
            return
        if len(piece) == 3:
            raw, lengths, at = piece
            size = lengths[at : at + CHUNK // 16]
            short = size <= INLINE
            inline = raw[at : at + CHUNK // 16][short, 4:]
            data, at = inline[np.arange(INLINE) < size[short, None]], 0
        else:
            data, at = piece
        for i, hit in enumerate(_holds(data, at, specs, found)):
            if hit:  # only ever set: another thread's finding is never written over
                found[i] = True

    # the chunks on a few threads: numpy's passes over them release the GIL, and one after
    # another they were one core's work (a dense trace's 5.6M NVTX names, 0.64 GB of text:
    # 0.2-0.6 s of one thread before the first byte of a large CSV is written)
    workers = min(LOOK_THREADS, _cores(), len(pieces))
    if workers < 2:
        for piece in pieces:
            look(piece)
    else:
        from concurrent.futures import ThreadPoolExecutor

        def look_each(mine: list) -> None:
            for piece in mine:
                look(piece)

        # every worker-th chunk to each thread: one task a thread, not one per chunk (a dense
        # trace's names are ~1,300 chunks)
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(look_each, [pieces[i::workers] for i in range(workers)]):
                pass
    return [not f for f in found]


LOOK_THREADS = 4  # threads looking at a large column's chunks at once


def _cores() -> int:
    from kview.io.sqlite_source import read_threads  # deferred: only a large column is read this way

    return read_threads()


def scattered(texts: pl.Series) -> bool:
    """Whether the bytes of `texts`'s longer values lie out of row order over more memory than a
    cache holds (a column gathered after its text was made): a writer then waits on memory for
    each value, and a copy in row order is cheaper than that wait."""
    views = _views(texts)
    if views is None:
        return False
    import numpy as np

    for words, _, data in views:
        if sum(d.size for d in data) < CACHED:
            continue
        # every n-th view: rows in order keep their order in any such sample
        sample = words[:: max(1, len(words) // SAMPLE)]
        long = sample[sample[:, 0] > INLINE]
        where = (long[:, 2].astype(np.int64) << 32) | long[:, 3].astype(np.int64)
        if long.shape[0] > 1 and np.count_nonzero(np.diff(where) > 0) < 0.9 * (long.shape[0] - 1):
            return True
    return False


def repeats(texts: pl.Series, sample: int = 4096) -> bool:
    """Whether a spread sample of `texts` holds each distinct text 8 times or more on average:
    then their distinct values are fewer to look at than their rows (for texts nearly all
    distinct, such as five million op ranges' names, finding the distinct ones costs 3x the
    scan it would save)."""
    if texts.len() <= sample:
        return False
    spread = texts.gather_every(texts.len() // sample)
    return spread.n_unique() * 8 <= spread.len()
