"""The timeline: rows of intervals binned into character cells, as the Nsight Systems GUI lays
them out. GPU rows first (one per device and stream: kernels, memcpy, memset), then per CPU
thread a CUDA API row and one NVTX row per nesting depth (push/pop ranges), plus one row for
its start/end ranges, which may overlap.

A row keeps its intervals sorted by start (from the trace's zero), its ends sorted, and the
union of its intervals as disjoint segments with prefix sums of their lengths, so the busy time
of a cell [a, b) is F(b) - F(a), F(t) the union's length before t (overlapping ops count once,
as Overview and Ranks count busy time): a few searchsorted calls per cell edge, whatever the
number of intervals, and exact in integer ns. The number of ops in a cell is
(#starts < b) - (#ends <= a). Rows are numpy slices of a few sorted arrays;
a row's prefix sums are built the first time it is binned, so only the rows on screen cost
anything.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.categories import name_categories
from kview.analysis.ranks import make_run
from kview.analysis.run_clock import RunClock
from kview.derived import derived, frames
from kview.io.schema import PID_MASK
from kview.notation import fmt_ns, short_names
from kview.trace import Trace

# a cell's busy fraction in eighths, as the bar glyphs draw it (index 0: idle)
LEVELS = " ▁▂▃▄▅▆▇█"
# a run of cells one op covers is named when at least this wide
MIN_NAMED = 4
TID_MASK = 0xFFFFFF


@dataclass(eq=False)
class Row:
    """One row of the timeline: intervals sorted by start, with what to call and colour each."""

    kind: str  # "gpu" | "api" | "nvtx"
    label: str  # shown left of the row ("GPU0 s7", "API 1234", "NVTX 1234 d2")
    group: str  # GPU rows: the device; CPU rows: the thread they belong to
    depth: int  # NVTX push/pop depth; -1 for start/end ranges and other rows
    start: np.ndarray  # int64 ns from the trace's origin, ascending
    end: np.ndarray  # int64, in start order
    code: np.ndarray  # int index into the timeline's names of this kind
    cls: np.ndarray  # int8 index into the timeline's classes (category, API kind, range kind)
    ident: np.ndarray | None = None  # GPU rows: the op's Idx (Kernels' numbering)
    pid: int = -1  # the process (global_pid) whose ops or thread the row holds; -1 unknown
    # a run of several trace files on one timeline: the row's file (its place in the run), the
    # ns its times lie after the timeline's origin (start/end stay relative to the file's own
    # origin, so the files' rows are shared, not copied), and the key of its names in
    # Timeline.names (default: its kind)
    trace: int = 0
    offset: int = 0
    vocab: str = ""
    _sums: tuple | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.start)

    def when(self, i: int) -> tuple[int, int]:
        """Start and end of op `i` on the timeline's clock."""
        return int(self.start[i]) + self.offset, int(self.end[i]) + self.offset

    @property
    def names_key(self) -> str:
        return self.vocab or self.kind

    def sums(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None, np.ndarray, np.ndarray | None]:
        """(ends sorted, the union of the ops as disjoint segments (starts, ends), prefix sums
        of the segments' lengths, the index of the latest-ending op among the first k, or None
        when ends are already ascending).

        Rows whose ops never overlap (a stream, one NVTX depth) are their own union:
        (ends, None, prefix sums of durations, None)."""
        if self._sums is None:
            s, e = self.start, self.end
            if len(s) < 2 or bool((s[1:] >= e[:-1]).all()):
                cd = np.concatenate([[0], np.cumsum(e - s, dtype=np.int64)])
                self._sums = (e, None, cd, None)
                return self._sums
            monotone = bool((e[1:] >= e[:-1]).all())
            es = e if monotone else np.sort(e)
            # busy time is the union (what Overview and Ranks measure): a segment starts where
            # an op starts after every earlier one has ended
            reach = np.maximum.accumulate(e)
            first = np.flatnonzero(np.concatenate([[True], s[1:] > reach[:-1]]))
            us, ue = s[first], np.maximum.reduceat(e, first)
            cu = np.concatenate([[0], np.cumsum(ue - us, dtype=np.int64)])
            top = None
            if not monotone:  # nested API calls, overlapping start/end ranges
                top = np.maximum.accumulate(np.where(e == reach, np.arange(len(e)), 0))
            self._sums = (es, (us, ue), cu, top)
        return self._sums


@dataclass(eq=False)
class Cells:
    """A row binned into `width` cells between edges[0] and edges[-1]."""

    edges: np.ndarray  # width + 1 cell edges (ns from the origin)
    busy: np.ndarray  # ns inside each cell covered by an op (overlapping ops count once)
    count: np.ndarray  # ops overlapping each cell
    top: np.ndarray  # index into the row of the op a cell shows (latest-ending one), -1 if none

    @property
    def fraction(self) -> np.ndarray:
        """Busy fraction per cell, at most 1."""
        return np.minimum(self.busy / np.maximum(np.diff(self.edges), 1), 1.0)


def edges(t0: int, t1: int, width: int) -> np.ndarray:
    """Integer cell edges splitting [t0, t1) into `width` cells."""
    return t0 + (np.arange(width + 1, dtype=np.int64) * (t1 - t0)) // width


def busy_before(row: Row, t: np.ndarray) -> np.ndarray:
    """F(t): busy time of the row (the union of its ops) before each time in `t`."""
    es, seg, ce, _ = row.sums()
    if seg is None:  # ops never overlap: the ended ones, plus the part of the one open (i > j)
        i = np.searchsorted(row.start, t, side="right")
        j = np.searchsorted(es, t, side="right")
        open_ = np.minimum(j, len(row.start) - 1) if len(row.start) else j
        return ce[j] + np.where(i > j, t - (row.start[open_] if len(row.start) else 0), 0)
    us, ue = seg
    k = np.searchsorted(us, t, side="right")  # segments starting at or before t
    last = np.maximum(k - 1, 0)
    return np.where(k > 0, ce[last] + np.clip(t - us[last], 0, ue[last] - us[last]), 0)


def bin_row(row: Row, t0: int, t1: int, width: int) -> Cells:
    cells = edges(t0, t1, width)
    e = cells - row.offset if row.offset else cells  # on the row's own clock
    es, _, _, top_of = row.sums()
    busy = np.diff(busy_before(row, e))
    started = np.searchsorted(row.start, e[1:], side="left")  # ops starting before each cell's end
    ended = np.searchsorted(es, e[:-1], side="right")  # ops ended by each cell's start
    count = started - ended
    k = started - 1
    top = k.copy() if top_of is None else np.where(k >= 0, top_of[np.maximum(k, 0)], -1)
    ok = (k >= 0) & (row.end[np.maximum(top, 0)] > e[:-1]) & (count > 0)
    return Cells(cells, busy, count, np.where(ok, top, -1))


def marked(row: Row, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix counts of `mask` (per op, start order) in start order and in end order: what
    hits() needs, made once per highlight rather than on every redraw."""
    _, _, _, top_of = row.sums()
    cm = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    ends_order = mask if top_of is None else mask[np.argsort(row.end, kind="stable")]
    return cm, np.concatenate([[0], np.cumsum(ends_order, dtype=np.int64)])


def hits(row: Row, marks: tuple[np.ndarray, np.ndarray], cells: Cells) -> np.ndarray:
    """How many marked ops (`marked`) overlap each cell."""
    es = row.sums()[0]
    cm, cme = marks
    e = cells.edges - row.offset
    started = np.searchsorted(row.start, e[1:], side="left")
    ended = np.searchsorted(es, e[:-1], side="right")
    return cm[started] - cme[ended]


def op_at(row: Row, t0: int, t1: int) -> int:
    """The op a cell [t0, t1) shows (the latest-ending one started before t1 that reaches
    into it), or -1."""
    if len(row) == 0:
        return -1
    _, _, _, top_of = row.sums()
    t0, t1 = t0 - row.offset, t1 - row.offset
    k = int(np.searchsorted(row.start, t1, side="left")) - 1
    if k < 0:
        return -1
    i = k if top_of is None else int(top_of[k])
    return i if row.end[i] > t0 else -1


# -- the model --------------------------------------------------------------------------------
@dataclass(eq=False)
class Timeline:
    """Every row of a trace, and the names and classes its rows index."""

    origin: int  # time zero in the file's own clock (Trace.origin); rows count from it
    span: tuple[int, int]  # first start, last end (ns from the origin)
    rows: list[Row]
    names: dict[str, list[str]]  # per row kind: the name of each code
    classes: list[str]  # kernel categories, then API and range kinds
    threads: dict[str, str] = field(default_factory=dict)  # group -> thread title
    ranks: dict[str, int] = field(default_factory=dict)  # group -> rank (a run of several ranks)
    note: str = ""  # a run's files without a common clock: how they were lined up

    def class_code(self, name: str) -> int:
        return self.classes.index(name)


API_CLASSES = ["api:sync", "api:launch", "api:memory", "api:other"]
NVTX_CLASSES = ["nvtx:user", "nvtx:op", "nvtx:library"]


def _classes(categories: list[str]) -> list[str]:
    return [*categories, *API_CLASSES, *NVTX_CLASSES]


def _segments(keys: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each run of equal keys in a sorted array."""
    if len(keys) == 0:
        return []
    cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = np.concatenate([[0], cut, [len(keys)]])
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def gpu_ops_by_idx(trace: Trace) -> pl.DataFrame:
    """Idx, start, end, device, stream and a name key (kernels: the name's StringIds id;
    memcpy: -1000 - copy kind; memset: -1) of every GPU op, numbered as
    attribution.gpu_ops numbers them (the same parts in the same order, the same stable sort)
    without reading or joining a kernel name per op. Not kept on the trace (73 MB at 1.3M ops):
    the rows hold what the timeline needs of it."""
    cols = ["start", "end", "device", "stream", "global_pid"]
    parts = []
    if trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        parts.append(
            trace.columns("kernels", cols + ["name_id"]).select(*cols, pl.col("name_id").fill_null(-2).alias("key"))
        )
    if trace.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
        parts.append(
            trace.columns("memcpy", cols + ["copy_kind"]).select(
                *cols, (-1000 - pl.col("copy_kind").fill_null(-1)).alias("key")
            )
        )
    if trace.has("CUPTI_ACTIVITY_KIND_MEMSET"):
        parts.append(trace.columns("memset", cols).with_columns(pl.lit(-1, dtype=pl.Int64).alias("key")))
    if not parts:
        return pl.DataFrame(schema={"Idx": pl.Int64, **{c: pl.Int64 for c in cols}, "key": pl.Int64})
    ops = pl.concat(parts, how="diagonal_relaxed").sort(["start", "device", "stream"], maintain_order=True)
    return ops.with_row_index("Idx", offset=1).with_columns(pl.col("Idx").cast(pl.Int64))


def _op_names(trace: Trace, keys: pl.Series) -> pl.Series:
    """The name of each distinct name key (see gpu_ops_by_idx), as Kernels shows it."""
    labels = trace.memcpy_kind_labels
    ids = keys.filter(keys >= 0)
    got = dict(trace.string_values(ids).select("id", "value").iter_rows()) if len(ids) else {}
    out = []
    for k in keys.to_list():
        if k >= 0:
            out.append(str(got.get(k) or "?"))
        elif k == -1:
            out.append("[CUDA memset]")
        elif k == -2:
            out.append("?")
        else:
            out.append(f"[CUDA memcpy {labels.get(-1000 - k, '?')}]")
    return pl.Series("Kernel", out, dtype=pl.String)


GPU_OPS = pl.Schema({"start": pl.Int64, "end": pl.Int64, "code": pl.Int32, "cls": pl.Int8, "Idx": pl.Int64})
ROW_SPANS = pl.Schema({"label": pl.String, "group": pl.String, "lo": pl.Int64, "hi": pl.Int64, "pid": pl.Int64})


@derived(key="timeline.gpu", version="1", persist=True, codec=frames("ops", "rows", "names", "classes", whole=True))
def gpu_row_table(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The GPU rows of the timeline as integers, kept in the frame cache (a reopen reads them
    back instead of reading, naming and sorting every GPU op again): every op in row order
    (start, end, its name's code, its class, its Idx), each row's [lo, hi) of them with its
    label, group and process, the names the codes index (short and full), the categories the
    classes index."""
    ops = gpu_ops_by_idx(trace)
    if ops.height == 0:
        return (
            pl.DataFrame(schema=GPU_OPS),
            pl.DataFrame(schema=ROW_SPANS),
            pl.DataFrame(schema={"short": pl.String, "full": pl.String}),
            pl.DataFrame({"category": ["other"]}),
        )
    keys = ops["key"].unique().sort()
    names = _op_names(trace, keys)
    cats = name_categories(names.unique())
    named = pl.DataFrame({"key": keys, "Kernel": names}).join(
        cats.select("Kernel", "name_category"), on="Kernel", how="left", maintain_order="left"
    )
    named = named.with_columns(
        pl.when(pl.col("key") == -1)
        .then(pl.lit("memset"))
        .when(pl.col("key") <= -1000)
        .then(pl.lit("memcpy"))
        .otherwise(pl.col("name_category").fill_null("other"))
        .alias("cat")
    )
    categories = sorted(set(named["cat"].to_list()) | {"other"})
    code_of = named.select(
        "key",
        pl.int_range(pl.len(), dtype=pl.Int32).alias("code"),
        pl.col("cat").replace_strict(categories, list(range(len(categories))), return_dtype=pl.Int8).alias("cls"),
    )
    o = ops.join(code_of, on="key", how="left").with_columns(pl.col("global_pid").fill_null(-1))
    # processes sharing a device have their own streams (numbered alike): a row per process there.
    # Ops the trace ties to no process (-1) do not make a second process: on a device of one
    # process they are its stream's (one row per stream)
    shared = (
        o.group_by("device")
        .agg((pl.col("global_pid").filter(pl.col("global_pid") != -1).n_unique() > 1).alias("_shared"))
        .filter("_shared")["device"]
    )
    o = o.with_columns(
        pl.when(pl.col("device").is_in(shared.implode())).then(pl.col("global_pid")).otherwise(-1).alias("_split")
    ).sort(["device", "_split", "stream", "start", "end", "Idx"])
    dev, stream = o["device"].fill_null(-1).to_numpy(), o["stream"].fill_null(-1).to_numpy()
    split, pid = o["_split"].to_numpy(), o["global_pid"].to_numpy()
    # one row per (device, process where shared, stream), in that order
    new = np.concatenate([[False], (dev[1:] != dev[:-1]) | (split[1:] != split[:-1]) | (stream[1:] != stream[:-1])])
    spans = []
    for lo, hi in _segments(np.cumsum(new)):
        d, s, p = int(dev[lo]), int(stream[lo]), int(split[lo])
        group = f"GPU{d}" if p == -1 else f"GPU{d} pid {(p >> 24) & TID_MASK}"
        # the row's process (-1 only where no op has one)
        spans.append((f"GPU{d} s{s}", group, lo, hi, int(pid[lo:hi].max())))
    return (
        o.select(pl.col(c).cast(t) for c, t in GPU_OPS.items()),
        pl.DataFrame(spans, schema=ROW_SPANS, orient="row"),
        pl.DataFrame({"short": short_names(names), "full": names}),
        pl.DataFrame({"category": categories}),
    )


def gpu_rows(trace: Trace) -> tuple[list[Row], dict[str, list[str]], list[str]]:
    """One row per (device, stream); (rows, op names by code (short and full), categories by
    class code). Ops are coloured by their name's category until `recolour` gives them the
    attributed one."""
    ops, spans, names, categories = gpu_row_table(trace)
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()
    code, cls, idx = ops["code"].to_numpy(), ops["cls"].to_numpy(), ops["Idx"].to_numpy()
    rows = [
        Row("gpu", label, group, -1, start[lo:hi], end[lo:hi], code[lo:hi], cls[lo:hi], idx[lo:hi], pid)
        for label, group, lo, hi, pid in spans.iter_rows()
    ]
    gpu_names = {"gpu": names["short"].to_list(), "gpu_full": names["full"].to_list()}
    return rows, gpu_names, categories["category"].to_list()


def recolour(tl: Timeline, categories: pl.DataFrame) -> Timeline:
    """`tl` with its GPU ops in the categories of `categories` (Idx, Category: the attributed
    table's), so the Timeline and Kernels agree; CPU rows keep their classes."""
    n_old = len(tl.classes) - len(API_CLASSES) - len(NVTX_CLASSES)
    old = tl.classes[:n_old]
    cats = sorted(set(categories["Category"].unique().drop_nulls().to_list()) | set(old) | {"other"})
    top = max([int(r.ident.max()) for r in tl.rows if r.ident is not None and len(r)] + [0])
    by_idx = np.full(top + 1, -1, dtype=np.int16)
    c = categories.filter(pl.col("Idx") <= top)
    by_idx[c["Idx"].to_numpy()] = (
        c["Category"].fill_null("other").replace_strict(cats, list(range(len(cats))), return_dtype=pl.Int16).to_numpy()
    )
    remap = np.array(
        [cats.index(k) for k in old] + [len(cats) + i for i in range(len(API_CLASSES) + len(NVTX_CLASSES))],
        dtype=np.int8,
    )
    rows = []
    for r in tl.rows:
        if r.ident is not None:
            new = by_idx[r.ident]
            cls = np.where(new >= 0, new, remap[r.cls]).astype(np.int8)
        else:
            cls = remap[r.cls]
        rows.append(replace(r, cls=cls))
    return Timeline(tl.origin, tl.span, rows, tl.names, _classes(cats), tl.threads, tl.ranks)


def _thread_titles(trace: Trace, tids: list[int]) -> dict[int, str]:
    """global_tid -> "name pid/tid" (the thread's name when the export has one)."""
    th = trace.threads
    names: dict[int, str] = {}
    if th.height:
        t = trace.with_strings(th.filter(pl.col("global_tid").is_in(tids)), "name_id", "tname")
        names = {int(g): str(n) for g, n in t.select("global_tid", "tname").iter_rows() if n}
    out = {}
    for g in tids:
        pid, tid = (g >> 24) & TID_MASK, g & TID_MASK
        out[g] = f"{names.get(g, 'thread')} {pid}/{tid}" if pid else f"{names.get(g, 'thread')} {tid}"
    return out


def _api_class(names: pl.Series) -> pl.Series:
    """Each CUDA API name's kind (API_CLASSES' index); kept by `timeline.api` (change its version
    with these rules)."""
    lo = names.str.to_lowercase()
    return pl.select(
        pl.when(
            lo.str.contains("synchronize|wait|^cudamemcpy(2d|3d)?(_v\\d+)?$|^cumemcpy[a-z0-9]*_?v?\\d*$")
            & ~lo.str.contains("async")
        )
        .then(0)
        .when(lo.str.contains("launch|graphlaunch"))
        .then(1)
        .when(lo.str.contains("memcpy|memset|malloc|free|memalloc|host"))
        .then(2)
        .otherwise(3)
        .cast(pl.Int8)
    ).to_series()


def cpu_rows(trace: Trace, n_categories: int) -> tuple[list[Row], dict[str, list[str]], dict[str, str]]:
    """Per thread: a CUDA API row, NVTX rows by depth, a start/end row. (rows, names by kind,
    thread titles by group). NVTX depths come from the push/pop nesting the attribution built."""
    rows_by_tid: dict[int, list[Row]] = {}
    names: dict[str, list[str]] = {"api": [], "nvtx": []}
    api_base, nvtx_base = n_categories, n_categories + len(API_CLASSES)
    calls, api_names = api_row_table(trace)
    if calls.height:
        names["api"] = api_names["name"].to_list()
        tid = calls["tid"].to_numpy()
        start, end = calls["start"].to_numpy(), calls["end"].to_numpy()
        code, cls = calls["code"].to_numpy(), (calls["kind"].to_numpy() + api_base).astype(np.int8)
        for lo, hi in _segments(tid):
            g = int(tid[lo])
            rows_by_tid.setdefault(g, []).append(
                Row(
                    "api", "CUDA API", str(g), -1, start[lo:hi], end[lo:hi], code[lo:hi], cls[lo:hi], None, g & PID_MASK
                )
            )
    if trace.has("NVTX_EVENTS"):
        nvtx_rows, names["nvtx"] = _nvtx_rows(trace, nvtx_base)
        for g, row in nvtx_rows:
            rows_by_tid.setdefault(g, []).append(row)
    titles = _thread_titles(trace, list(rows_by_tid))
    rows: list[Row] = []
    # threads in order of their first event (the main thread first, as a profile starts there)
    first = {g: min(int(r.start[0]) for r in rs if len(r)) for g, rs in rows_by_tid.items()}
    for g in sorted(rows_by_tid, key=lambda g: (first[g], g)):
        rs = rows_by_tid[g]
        # the API row first, then depths in order, start/end ranges last
        rows += sorted(rs, key=lambda r: (r.kind != "api", r.depth < 0, r.depth))
    return rows, names, {str(g): t for g, t in titles.items()}


API_CALLS = pl.Schema({"tid": pl.Int64, "start": pl.Int64, "end": pl.Int64, "code": pl.Int32, "kind": pl.Int8})


@derived(key="timeline.api", version="1", persist=True, codec=frames("calls", "names", whole=True))
def api_row_table(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CUDA API rows of the timeline as integers, kept in the frame cache: every runtime
    call by thread, then start (the longer first where two start together), its name's code
    in the second frame (the name without its _vN suffix) and its kind (API_CLASSES' index)."""
    empty = (pl.DataFrame(schema=API_CALLS), pl.DataFrame(schema={"name": pl.String}))
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return empty
    r = trace.columns("runtime", ["start", "end", "global_tid", "name_id"]).filter(
        pl.col("start").is_not_null() & pl.col("end").is_not_null()
    )
    if r.height == 0:
        return empty
    ids = r.select(pl.col("name_id").fill_null(-1)).unique().sort("name_id")
    ids = trace.with_strings(ids, "name_id", "name").with_columns(pl.col("name").fill_null("?"))
    ids = ids.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int32).alias("code"), pl.Series("kind", _api_class(ids["name"]))
    )
    calls = (
        r.with_columns(pl.col("name_id").fill_null(-1))
        .join(ids.select("name_id", "code", "kind"), on="name_id", how="left")
        .sort(["global_tid", "start", "end"], descending=[False, False, True])
        .select(pl.col("global_tid").alias("tid"), "start", "end", "code", "kind")
    )
    return (
        calls.select(pl.col(c).cast(t) for c, t in API_CALLS.items()),
        ids.select(pl.col("name").str.replace(r"_v\d+$", "")),
    )


def _nvtx_rows(trace: Trace, nvtx_base: int) -> tuple[list[tuple[int, Row]], list[str]]:
    """(thread, row) of every NVTX row (push/pop ranges by depth, then start/end ranges), and
    the names the rows' codes index: slices of `nvtx_row_table`'s columns, one per run of
    (thread, depth)."""
    table, distinct = nvtx_row_table(trace)
    if table.height == 0:
        return [], []
    tid, depth = table["tid"].to_numpy(), table["depth"].to_numpy()
    start, end = table["start"].to_numpy(), table["end"].to_numpy()
    code, cls = table["code"].to_numpy(), (table["kind"].to_numpy() + nvtx_base).astype(np.int8)
    # a new row wherever the thread or the depth changes (the table holds them run by run)
    cut = np.flatnonzero((tid[1:] != tid[:-1]) | (depth[1:] != depth[:-1])) + 1
    bounds = np.concatenate([[0], cut, [len(tid)]]).tolist()
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        g, d = int(tid[lo]), int(depth[lo])
        label = "NVTX start/end" if d < 0 else f"NVTX d{d}"
        out.append(
            (g, Row("nvtx", label, str(g), d, start[lo:hi], end[lo:hi], code[lo:hi], cls[lo:hi], None, g & PID_MASK))
        )
    return out, distinct["short"].to_list()


NVTX_ROWS = pl.Schema(
    {"tid": pl.Int64, "depth": pl.Int16, "start": pl.Int64, "end": pl.Int64, "code": pl.Int32, "kind": pl.Int8}
)


@derived(key="timeline.nvtx", version="2", persist=True, codec=frames("rows", "names", whole=True))
def nvtx_row_table(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The NVTX rows of the timeline as integers, kept in the frame cache (a reopen reads them
    back without the ranges' labels): one row per range, run by run of (thread, depth) in the
    timeline's order (push/pop depths, then start/end ranges), start and end from the trace's
    origin, `code` the range's short name's index in the second frame (short), `kind` its
    range kind (0 user range, 1 op marker, 2 library).

    A range's short name is its op for an op marker (`aten::mm, op_id = 7, seq = 3, sizes =
    ...` -> `aten::mm`), numbered among the distinct short names: with autograd shapes nearly
    every range has a label of its own (5.6 million on the dense 1.1M-kernel trace), and
    keeping each as a Python string would cost more than all the rows' arrays."""

    empty = (pl.DataFrame(schema=NVTX_ROWS), pl.DataFrame(schema={"short": pl.String}))
    cls_of = nv.range_kinds(trace)  # by name code, as short_of
    if len(cls_of) == 0:
        return empty
    distinct, short_of = nv.short_labels(trace)
    # the columns read, and no copy of them where every range is a push/pop range (the usual trace)
    ranges = nv.projection_ranges(trace).select("global_tid", "start", "end", "name_code", "id", "style")
    push = pl.col("style") == "PushPop"
    pushpop = ranges if ranges.select(push.all()).item() else ranges.filter(push)
    # nest()'s order and depths: from the nesting where the trace holds it already (attribution
    # made it: the explorer's worker), else from sorted searches alone (without its parents)
    nesting = trace.store.peek(nv.projection_nesting)
    parts = [pushpop_depths(pushpop) if nesting is None else _nested_depths(nesting)]
    del nesting, pushpop
    se = ranges.filter(~push).sort(["global_tid", "start", "end"], descending=[False, False, True])
    del ranges
    parts.append(
        (
            se["global_tid"].to_numpy(),
            np.full(se.height, -1, dtype=np.int16),
            se["start"].to_numpy(),
            se["end"].to_numpy(),
            se["name_code"].to_numpy(),
        )
    )
    if not sum(len(tid) for tid, *_ in parts):
        return empty[0], distinct.select("short")
    # each part's rows run by run of (thread, depth), gathered once into the table's columns
    # rather than each run copied and the runs joined
    orders = [_run_order(tid, depth, start, end) for tid, depth, start, end, _ in parts]
    codes = np.concatenate([code[order] for (*_, code), order in zip(parts, orders)])
    table = pl.DataFrame(
        {
            "tid": _gathered([p[0] for p in parts], orders, np.int64),
            "depth": _gathered([p[1] for p in parts], orders, np.int16),
            "start": _gathered([p[2] for p in parts], orders, np.int64),
            "end": _gathered([p[3] for p in parts], orders, np.int64),
            "code": short_of[codes],
            "kind": cls_of[codes],
        },
        schema=NVTX_ROWS,
    )
    return table, distinct.select("short")


def pushpop_depths(r: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(thread, depth, start, end, name code) of push/pop ranges in nv.nest()'s order (thread,
    then start, longer first, then id) with nest()'s depths, without the parents nest() finds."""

    r, depth = nv.nest_depths(r.select("global_tid", "start", "end", "name_code", "id"))
    return (
        r["global_tid"].to_numpy(),
        depth.astype(np.int16),
        r["start"].to_numpy(),
        r["end"].to_numpy(),
        r["name_code"].to_numpy(),
    )


def _nested_depths(nesting: nv.Nesting) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """pushpop_depths' arrays read from the push/pop ranges' nesting (the same rows, order and
    depths), rather than those ranges sorted and their depths found again."""
    tid = np.empty(len(nesting.depth), dtype=np.int64)
    for g, (lo, hi) in nesting.threads.items():
        tid[lo:hi] = g
    code = nesting.take(["name_code"])["name_code"].to_numpy()
    return tid, nesting.depth.astype(np.int16), nesting.start, nesting.end, code


def _gathered(columns: list[np.ndarray], orders: list[np.ndarray], dtype: type) -> np.ndarray:
    """The parts' `columns` each in its order, one after another, in one array."""
    out: np.ndarray = np.empty(sum(len(o) for o in orders), dtype=dtype)
    at = 0
    for col, order in zip(columns, orders):
        out[at : at + len(order)] = col[order]
        at += len(order)
    return out


def _run_order(tid: np.ndarray, depth: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The rows of ranges sorted by thread, then start (nest()'s order), run by run of (thread,
    depth): a stable sort by depth within each thread, in numpy (depths are small integers, so
    that sort is a radix sort), never a sort of all ranges."""
    if len(tid) == 0:
        return np.zeros(0, dtype=np.int64)
    base = None
    if len(tid) > 1 and (tid[1:] < tid[:-1]).any():  # not in nest()'s order after all
        base = np.lexsort((-end, start, tid))
        tid, depth = tid[base], depth[base]
    order = np.concatenate([np.argsort(depth[lo:hi], kind="stable") + lo for lo, hi in _segments(tid)])
    return order if base is None else base[order]


def build(trace: Trace, cpu: bool = True) -> Timeline:
    """The timeline of a trace: GPU rows, and (with `cpu`) the CPU threads' rows."""
    rows, gpu_names, categories_ = gpu_rows(trace)
    names: dict[str, list[str]] = {**gpu_names, "api": [], "nvtx": []}
    threads: dict[str, str] = _device_titles(trace, rows)
    if cpu:
        crow, cnames, cthreads = cpu_rows(trace, len(categories_))
        rows += crow
        names.update(cnames)
        threads.update(cthreads)
    return by_rank(trace, Timeline(trace.origin, _span(rows), prepared(rows), names, _classes(categories_), threads))


def prepared(rows: list[Row]) -> list[Row]:
    """`rows` with their prefix sums built, here (the loader's thread) rather than on the key
    that first shows a row: expanding a thread of a million ranges must not wait for them."""
    for r in rows:
        r.sums()
    return rows


def with_cpu_rows(trace: Trace, tl: Timeline) -> Timeline:
    """`tl` (GPU rows only) with the CPU threads' rows added."""
    n_cat = len(tl.classes) - len(API_CLASSES) - len(NVTX_CLASSES)
    crow, cnames, threads = cpu_rows(trace, n_cat)
    rows = tl.rows + prepared(crow)
    full = Timeline(tl.origin, _span(rows), rows, {**tl.names, **cnames}, tl.classes, {**tl.threads, **threads})
    return by_rank(trace, full)


def rank_units(trace: Trace, rows: list[Row]) -> pl.DataFrame | None:
    """(global_pid, device, rank) of a trace whose GPU work ran in several processes (one nsys
    export of a distributed run; `rows` its GPU rows hold the processes), as
    kview.analysis.ranks numbers them; None for one process."""
    if len({r.pid for r in rows if r.kind == "gpu" and r.pid != -1}) < 2:
        return None

    return make_run([trace]).units.select("global_pid", "device", "rank")


def by_rank(trace: Trace, tl: Timeline) -> Timeline:
    """`tl` with its rows grouped by rank (rank 0's GPUs and threads, then rank 1's, ...; threads
    of processes that are no rank last) and each group titled with its rank, when the trace
    holds several ranks' processes. A thread belongs to its process's rank (the lowest, for a
    process driving several GPUs)."""
    units = rank_units(trace, tl.rows)
    if units is None or units["rank"].n_unique() < 2:
        return tl
    return _ranked(tl, units.with_columns(pl.lit(0, dtype=pl.Int64).alias("trace")))


def _device(row: Row) -> int:
    return int(row.label[3:].split(" ")[0])  # "GPU0 s7"


def _ranked(tl: Timeline, units: pl.DataFrame) -> Timeline:
    """`tl` grouped by the ranks of `units` (trace, global_pid, device, rank): a GPU row goes
    with its (file, process, device)'s rank, a thread with its process's lowest rank, every row
    of a file holding one rank with that rank."""
    of_unit: dict[tuple, int] = {}
    of_pid: dict[tuple, int] = {}
    of_file: dict[int, set[int]] = {}
    for t, p, d, k in units.select("trace", "global_pid", "device", "rank").sort("rank", descending=True).iter_rows():
        if p is not None and d is not None:
            of_unit[(t, p, d)] = k
        if p is not None:
            of_pid[(t, p)] = k
        of_file.setdefault(t, set()).add(k)
    only = {t: ks.pop() for t, ks in of_file.items() if len(ks) == 1}
    ranks: dict[str, int] = {}
    for r in tl.rows:
        if r.kind == "gpu":
            rank = of_unit.get((r.trace, r.pid, _device(r)))
        else:
            rank = of_pid.get((r.trace, r.pid))
        rank = only.get(r.trace) if rank is None else rank
        if rank is not None:
            ranks.setdefault(r.group, rank)
    # a stable sort: within a rank the rows keep their order (its GPU rows first)
    order = sorted(range(len(tl.rows)), key=lambda i: (tl.rows[i].group not in ranks, ranks.get(tl.rows[i].group, 0)))
    rows = [tl.rows[i] for i in order]
    threads = {g: (f"rank {ranks[g]} · {t}" if g in ranks else t) for g, t in tl.threads.items()}
    return Timeline(tl.origin, tl.span, rows, tl.names, tl.classes, threads, ranks)


def of_run(timelines: list[Timeline], units: pl.DataFrame, files: list[str], clock: RunClock | None = None) -> Timeline:
    """One timeline of a run opened as several files (one per rank, say): every file's rows on
    the run's clock (`clock`, kview.analysis.run_clock: each file's zero placed by the clock it
    records; without it, every file from its own zero), grouped by
    the run's ranks (`units`: trace, global_pid, device, rank, as kview.analysis.ranks numbers
    them); rows of no rank are titled with their file's name. The files' rows are shared, not
    copied: each keeps its own times and names, with an offset (Row.offset, Row.vocab)."""
    if len(timelines) == 1:
        return timelines[0]
    offsets = clock.offsets if clock is not None else tuple(0 for _ in timelines)
    n_fixed = len(API_CLASSES) + len(NVTX_CLASSES)
    cats = sorted({c for tl in timelines for c in tl.classes[: len(tl.classes) - n_fixed]} | {"other"})
    rows: list[Row] = []
    names: dict[str, list[str]] = {}
    threads: dict[str, str] = {}
    for i, tl in enumerate(timelines):
        own = tl.classes[: len(tl.classes) - n_fixed]
        remap = np.array([cats.index(c) for c in own] + [len(cats) + j for j in range(n_fixed)], dtype=np.int8)
        names.update({f"{k}#{i}": v for k, v in tl.names.items()})
        for r in tl.rows:
            group = f"{i}:{r.group}"
            title = tl.threads.get(r.group, r.group)
            if r.group in tl.ranks:  # the file's own grouping (a multi-process export) is redone below
                title = title.removeprefix(f"rank {tl.ranks[r.group]} · ")
            threads[group] = f"{files[i]} · {title}"
            rows.append(
                replace(
                    r,
                    group=group,
                    trace=i,
                    offset=r.offset + offsets[i],
                    vocab=f"{r.names_key}#{i}",
                    cls=remap[r.cls],
                )
            )
    run = _ranked(Timeline(0, _span(rows), rows, names, _classes(cats), threads), units)
    run.note = clock.note if clock is not None else ""
    # a ranked group is named by its rank; the file name stays on rows of no rank
    for g, k in run.ranks.items():
        i = int(g.split(":", 1)[0])
        run.threads[g] = run.threads[g].replace(f"rank {k} · {files[i]} · ", f"rank {k} · ", 1)
    return run


def _device_titles(trace: Trace, rows: list[Row]) -> dict[str, str]:
    """GPU group -> "GPU0 NVIDIA H200" (the device's name when the trace has it)."""
    dev = trace.devices
    names = {}
    if dev.height and {"id", "name"} <= set(dev.columns):
        names = {int(i): str(n) for i, n in dev.select("id", "name").iter_rows() if i is not None and n}
    out = {}
    for r in rows:
        d = _device(r)
        out[r.group] = f"{r.group} {names[d]}" if d in names else r.group
    return out


def _span(rows: list[Row]) -> tuple[int, int]:
    full = [r for r in rows if len(r)]
    if not full:
        return (0, 1)
    lo = min(int(r.start[0]) + r.offset for r in full)
    hi = max(int(r.end.max()) + r.offset for r in full)
    return (lo, max(hi, lo + 1))


# -- the picture --------------------------------------------------------------------------
def picture(tl: Timeline, row: Row, cells: Cells) -> tuple[str, list[int]]:
    """The characters of a binned row and the class of each cell (-1 idle).

    A cell one op covers alone shows that op: its class, and, where the op covers a run of at
    least MIN_NAMED cells, its name written across the run. A cell several ops share (or one
    op covers partly) shows a bar of its busy fraction in eighths, in the class of the
    latest-ending op in it."""
    frac = cells.fraction
    levels = np.where(cells.count > 0, np.maximum(np.ceil(frac * 8), 1), 0).astype(np.int64)
    chars = [LEVELS[v] for v in levels.tolist()]
    top = cells.top
    cls = np.where(top >= 0, row.cls[np.maximum(top, 0)], -1).tolist()
    sole = (cells.count == 1) & (top >= 0)
    if sole.any():
        key = np.where(sole, top, -1)
        names = tl.names.get(row.names_key, [])
        w = len(key)
        i = 0
        keys = key.tolist()
        while i < w:
            k = keys[i]
            j = i + 1
            while j < w and keys[j] == k:
                j += 1
            if k >= 0 and j - i >= MIN_NAMED:
                name = names[int(row.code[k])] if names else ""
                text = name[: j - i - 1]
                chars[i : i + len(text)] = list(text)
            i = j
    return "".join(chars), cls


def nice_step(span: float, cells: int, every: int = 12) -> int:
    """A tick interval of 1, 2 or 5 times a power of ten ns, about every `every` cells."""
    want = span / max(cells / every, 1)
    p = 10 ** int(np.floor(np.log10(max(want, 1))))
    for m in (1, 2, 5, 10):
        if m * p >= want:
            return int(m * p)
    return int(10 * p)


def tick_label(t: int, step: int, top: int) -> str:
    """A tick at `t` in the unit of the window's end `top` (`116.4 ms`), with as many decimals
    as the ticks' `step` needs, so neighbouring ticks never read the same at any zoom
    (`116.4001 ms`, `116.4002 ms`)."""
    if t == 0:
        return "0"
    scale, unit = next(((s, u) for s, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")) if abs(top) >= s), (1, "ns"))
    decimals = max(0, -int(np.floor(np.log10(step / scale)))) if step < scale else 0
    return f"{t / scale:,.{decimals}f} {unit}"


def axis(t0: int, t1: int, width: int) -> tuple[str, str]:
    """(tick labels, tick marks) for cells [t0, t1): times from the origin at round values."""
    step = nice_step(t1 - t0, width)
    first = -(-t0 // step) * step
    marks = ["─"] * width
    labels = [" "] * width
    per_cell = (t1 - t0) / width
    t = first
    while t < t1:
        c = int((t - t0) / per_cell)
        if 0 <= c < width:
            marks[c] = "┬"
            text = tick_label(t, step, t1)
            if all(ch == " " for ch in labels[c : c + len(text) + 1]) and c + len(text) <= width:
                labels[c : c + len(text)] = list(text)
        t += step
    return "".join(labels), "".join(marks)


def select_rows(tl: Timeline, kinds: set[str], depth: int) -> list[Row]:
    """The rows of `kinds`, NVTX push/pop rows only down to `depth` (start/end rows kept)."""
    return [r for r in tl.rows if r.kind in kinds and (r.kind != "nvtx" or r.depth < depth)]


def text(tl: Timeline, t0: int, t1: int, width: int, kinds: set[str], depth: int, title: str = "") -> str:
    """The timeline as plain text: a label column, the axis, then a line per row."""

    rows = select_rows(tl, kinds, depth)
    lw = min(max([len(r.label) for r in rows] + [10]) + 1, 24)
    cw = max(width - lw - 1, 10)
    labels, marks = axis(t0, t1, cw)
    step = nice_step(t1 - t0, cw)
    # an end off the tick grid gets the precision of a cell, so the ends agree with the span
    cell = max(1, (t1 - t0) // cw)
    ends = " .. ".join(tick_label(t, step if t % step == 0 else min(step, cell), t1) for t in (t0, t1))
    span = f"{ends} (span {fmt_ns(t1 - t0)}, {fmt_ns((t1 - t0) / cw)} per cell)"
    head = f"{title} · {span}" if title else span
    out = [
        *([head] if len(head) <= lw + 1 + cw else [title[: lw + 1 + cw], span]),  # a long title on a line of its own
        *(textwrap.wrap(tl.note, lw + 1 + cw) if tl.note else []),
        " " * (lw + 1) + labels,
        " " * lw + "┌" + marks,
    ]
    group = None
    for r in rows:
        if r.group != group:
            group = r.group
            title_ = tl.threads.get(group, group)
            out.append(f"{title_[: lw + 1 + cw]}")
        chars, _ = picture(tl, r, bin_row(r, t0, t1, cw))
        out.append(f"{r.label[:lw].ljust(lw)}│{chars}")
    return "\n".join(line.rstrip() for line in out) + "\n"


def table(tl: Timeline, t0: int, t1: int, width: int, kinds: set[str], depth: int) -> pl.DataFrame:
    """The numbers behind the picture: one row per (row, cell) with its edges, op time and ops."""
    parts = []
    for n, r in enumerate(select_rows(tl, kinds, depth)):
        c = bin_row(r, t0, t1, width)
        parts.append(
            pl.DataFrame(
                {
                    "Row": pl.Series([n] * width, dtype=pl.Int64),
                    "Group": [tl.threads.get(r.group, r.group)] * width,
                    "Track": [r.label] * width,
                    "Cell": pl.int_range(width, eager=True, dtype=pl.Int64),
                    "Start (ns)": c.edges[:-1],
                    "End (ns)": c.edges[1:],
                    "Busy (ns)": c.busy,
                    "Ops": c.count,
                    "Busy (%)": np.round(c.fraction * 100, 1),
                }
            )
        )
    if not parts:
        return pl.DataFrame(
            schema={
                "Row": pl.Int64,
                "Group": pl.String,
                "Track": pl.String,
                "Cell": pl.Int64,
                "Start (ns)": pl.Int64,
                "End (ns)": pl.Int64,
                "Busy (ns)": pl.Int64,
                "Ops": pl.Int64,
                "Busy (%)": pl.Float64,
            }
        )
    return pl.concat(parts)


def fmt_span(ns: int) -> str:
    return fmt_ns(ns)


def parse_time(text: str) -> int:
    """`1.5s`, `200ms`, `30us`, `12345` (ns) -> ns. ValueError for anything else."""
    import re

    m = re.fullmatch(r"\s*(-?[0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(ns|us|µs|ms|s)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read time {text!r} (e.g. 1.5s, 200ms, 30us, 12345 for ns)")
    scale = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}[(m[2] or "ns").lower()]
    return int(round(float(m[1]) * scale))
