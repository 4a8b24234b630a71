"""NVTX ranges with their nsys labels (`domain:text`), style, and enclosure structure.

Labels follow nsys exactly: the text is the registered string (textId) or the inline `text`;
the domain is the name of the domain-create event (type 75) with the same domainId in the same
process, and the default domain gives an empty prefix (":forward_pass").

Enclosure is computed column-wise. Push/pop ranges on one thread nest (LIFO), so a range's
depth is the number of earlier ranges (in start order) still open when it starts, found with
sorted searches; its parent is the nearest earlier range one level up, found with join_asof.
In that start order (a preorder of the nesting) the ancestor of a range at depth d is the last
range of depth d at or before it, one join_asof for any d, so no question about ancestors ever
walks a chain level by level: the innermost range around a call is found by a binary search
over depths (log2 of the deepest nesting rounds), and a push never popped inside a loop (depth
20,000) costs 15 rounds, not 20,000. Start/end ranges may overlap arbitrarily and are matched
against calls by an explicit per-thread interval join instead.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from kview.analysis import containment
from kview.analysis.summary_stats import even_bounds, in_slices
from kview.derived import Codec, derived
from kview.io.kineto_reader import MODULE_DOMAIN
from kview.io.memory_budget import budget
from kview.io.schema import (
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    NVTXT_PUSHPOP,
    NVTXT_STARTEND,
    PID_MASK,
    PID_ONLY,
)
from kview.io.sqlite_source import return_freed_memory
from kview.trace import Trace

STYLES = pl.Enum(["PushPop", "StartEnd", "Unknown"])
STYLE = (
    pl.when(pl.col("event_type").is_in([NVTX_PUSHPOP, NVTXT_PUSHPOP]))
    .then(pl.lit("PushPop"))
    .when(pl.col("event_type").is_in([NVTX_STARTEND, NVTXT_STARTEND]))
    .then(pl.lit("StartEnd"))
    .otherwise(pl.lit("Unknown"))
    .cast(STYLES)
)


# PyTorch's own ranges (emit_nvtx ops and autograd nodes, torch-internal record_functions named
# `X#Class.method` such as `Optimizer.step#AdamW.step`) and PyProf/DLProf's dict-shaped
# annotations ({'mod': ...}), as opposed to ranges the user annotated. `ProfilerStep#5` and
# `## forward ##` are user ranges.
OP_MARKER_RE = r", op_id = |, seq = |#[A-Za-z_]\w*\.|::|^\{'"
# Ranges libraries open around their own calls: never phases. NCCL's domain (its ranges keep
# their `nccl` names even where the export lost the domain's name), c10d's collectives in
# torch.profiler traces (`nccl:all_reduce`, `gloo:barrier`), and other library domains.
LIBRARY_DOMAINS = (
    "NCCL",
    "RCCL",
    "CCCL",
    "cuDNN",
    "cuBLAS",
    "cuBLASLt",
    "cuFFT",
    "cuSPARSE",
    "cuSOLVER",
    "NVSHMEM",
    "cudaProfilerApi",
    "NVTX3",
)
LIBRARY_LABEL_RE = r"^(nccl|rccl)[A-Z]|^(nccl|rccl|gloo|hccl|mpi|ucc|xccl|mccl):|^cudaProfilerApi$"
# a name whose domain is one of LIBRARY_DOMAINS: `domain:...`, or the domain alone (`$` is the
# text's end only: no multi-line flag)
LIBRARY_DOMAIN_RE = "^(?:" + "|".join(re.escape(d) for d in LIBRARY_DOMAINS) + ")(?::|$)"


def is_op_marker(name: str) -> bool:
    return re.search(OP_MARKER_RE, name) is not None


# OP_MARKER_RE's literal alternatives: one multi-pattern search of these finds nearly every op
# marker for half the regex's CPU, which then runs only on the labels without one
OP_MARKER_LITERALS = [", op_id = ", ", seq = ", "::"]


def _op_markers(label: pl.Series) -> pl.Series:
    """Whether each label is an op marker (matches OP_MARKER_RE; null where the label is)."""
    marker = label.str.contains_any(OP_MARKER_LITERALS)
    rest = (~marker).fill_null(True).arg_true()
    if rest.len() == 0:
        return marker
    return marker.scatter(rest, label.gather(rest).str.contains(OP_MARKER_RE))


def labelled(trace: Trace) -> pl.DataFrame:
    """All range events with an integer `name_code` (see `names`), `style` and `other_thread`
    (ended on a thread other than the one it started on); `end` may be null.

    Labels are built once per distinct (domain, textId, text) key, never per row, and rows
    carry only integers, so five million PyTorch ranges cost integers, not strings. Like
    nsys, a range joins every domain-create row of its domainId in its process, so the rare
    export with one domain created on several threads counts those ranges once per row.
    """
    return labelled_ranges(trace)[0]


def names(trace: Trace) -> pl.DataFrame:
    """name_code -> name (`domain:text`, as nsys prints it)."""
    table = labelled_ranges(trace)[1]
    if "name" not in table.columns:  # made as labels alone (`_label_only`): every name is `:label`
        return table.select("name_code", pl.format(":{}", pl.col("label")).alias("name"))
    return table


def _label_only(trace: Trace) -> bool:
    """Whether labelled_ranges makes its table of the labels alone (name_code, label), not the
    names, where every name is `:` + its label (the default domain, no registered strings):
    the command asks nothing of the trace but the attributed table (`kview kernels`:
    `Trace.only_attribution`, set before the ranges are read) and no frame cache is written.
    Each name was a copy of the read's text (0.6 GB on dense_x25, 140k fresh pages) that the
    labels then cut back to the text. The Overview keeps the names: there the read's views
    filtered and put in one chunk beside the read's text raised its peak (+0.08-0.12 GB)."""
    return trace.only_attribution and trace.ranges_only_for_attribution and trace.store.disk is None


def _styled(frames: tuple[pl.DataFrame, ...]) -> tuple[pl.DataFrame, pl.DataFrame]:
    lab, table = frames
    return lab.with_columns(pl.col("style").cast(STYLES)), table


# the frames as made, the style read back as the enum it is (Parquet keeps it as text)
STYLED = Codec("frames:labelled,names; style enum", ("labelled", "names"), tuple, _styled)


# integers only, so a reopen skips the strings; a table of the labels alone is never written
@derived(key="nvtx", version="2", persist=True, codec=STYLED, keep=lambda frames: "name" in frames[1].columns)
def labelled_ranges(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(labelled, names): see those two.

    A range's label is one key until the names are built: its domain's index and its registered
    string's id or its inline text. Keys are numbered by first appearance (`first_appearance`:
    one hash per row, no string table), names are made once per distinct key and numbered the
    same way, so names that read the same (a registered string equal to an inline text, a domain
    created twice) share a code, and no million strings are sorted, joined or hashed into a
    dictionary.
    """
    ev = trace.nvtx_events.with_columns(pl.col("text").cast(pl.String))
    r = ev.filter(pl.col("event_type") != NVTX_DOMAIN_CREATE)
    # the process key and the filled domain made of the domain rows alone, and of the ranges only
    # where there are domains to join: two columns of every range (92 MB on a dense trace) fewer
    # at the read's peak
    pid, domain_id = (pl.col("global_tid") & PID_ONLY).alias("pid_key"), pl.col("domain_id").fill_null(-1)
    doms = ev.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE).with_columns(pid, domain_id)
    # registered string first, inline text second, as nsys's coalesce(sid.value, text)
    ids = r.select(pl.col("text_id").drop_nulls().unique())
    sids = trace.with_strings(ids, "text_id", "sid").drop_nulls("sid")
    registered = pl.col("text_id").is_in(sids["text_id"].implode())
    if doms.height:
        # a range joins every domain-create row of its domainId in its process, as in nsys (the
        # rare domain created on several threads counts its ranges once per row)
        named = doms.with_columns(pl.col("text").alias("dtext"))
        dom = (
            trace.with_strings(named, "text_id", "dsid")
            .sort("start", maintain_order=True)
            .group_by(["domain_id", "global_tid"], maintain_order=True)
            .agg(pl.coalesce("dsid", "dtext").first().alias("domain"), pl.col("pid_key").first())
            .with_row_index("dom_ix", offset=1)
            .with_columns(pl.col("dom_ix").cast(pl.Int64))
        )
        on = ["domain_id", "pid_key"]
        keys = dom.select(*on, "dom_ix")
        if keys.select(pl.struct(on).is_unique().all()).item():
            # each range meets one domain row at most: joined on the key columns alone and the
            # column added, so the text keeps the read's chunks
            r = r.with_columns(r.select(domain_id, pid).join(keys, on=on, how="left", maintain_order="left")["dom_ix"])
        else:  # a domain created on several threads of a process: its ranges' rows repeat
            r = r.with_columns(domain_id, pid).join(keys, on=on, how="left", maintain_order="left")
        del keys
        domains = dom.select("dom_ix", "domain")
        del named, dom
    else:
        r = r.with_columns(pl.lit(None, dtype=pl.Int64).alias("dom_ix"))
        domains = pl.DataFrame(schema={"dom_ix": pl.Int64, "domain": pl.String})
    if sids.height:
        # the text from a frame of its own: a select over columns chunked unlike the read's
        # (dom_ix) copies every column into one chunk
        text = pl.DataFrame([r["text_id"], r["text"]]).select(
            pl.when(registered).then(None).otherwise(pl.col("text")).alias("_text")
        )
        sid: pl.Expr = pl.when(registered).then(pl.col("text_id"))
    else:  # no registered strings: the text as read (a column of every range's string id and a
        # copy of the text's views fewer, 0.14 GB on a dense trace, made and let go at the read's peak)
        text = r["text"].alias("_text").to_frame()
        sid = pl.lit(None, dtype=pl.Int64)
    key = r.select(pl.col("dom_ix").fill_null(0), sid.alias("_sid")).hstack(text)
    del text
    # the event type as the style it says and the thread a range ended on as whether it is
    # another: two integer columns of every range fewer (92 MB on a dense trace), held by every
    # NVTX report and the Overview
    labelled_ = pl.DataFrame([r[c] for c in ("id", "start", "end", "global_tid")]).hstack(
        r.select(pl.col("end_global_tid").is_not_null().alias("other_thread"), STYLE.alias("style")).get_columns()
    )
    # the read's columns no one holds now handed back before the keys are numbered and copied:
    # kept by the C allocator, they and that work were the read's peak (0.3 GB over it, dense
    # trace: the event type, both thread ids, the domain, the string id and the text's views)
    del ev, r, doms
    return_freed_memory()
    key_code, firsts = first_appearance(key)
    # The names are made from the first row of each key, one chunk of the read at a time, with
    # nothing else holding the read's text: each chunk's text is let go once its names are made,
    # so the read's text and the names' (both ~0.6 GB on a dense trace) are never all held at once.
    # a key column that joins nothing below (no domains, no registered strings) is not copied
    joined = [c for c, table in (("dom_ix", domains), ("_sid", sids)) if table.height]
    if not joined and _label_only(trace):
        # each label the first row's text of its key, its views into the read's own buffers (in
        # one chunk: readers gather labels by code)
        label = key["_text"]
        del key
        label = label.filter(firsts).rechunk()
        del firsts
        if label.null_count():
            label = label.fill_null("")
        table = (
            label.alias("label").to_frame().with_row_index("name_code").with_columns(pl.col("name_code").cast(pl.Int64))
        )
        del label
        return _one_chunk(labelled_.insert_column(5, key_code.alias("name_code"))), table
    pending = _by_chunk(pl.DataFrame([key[c] for c in (*joined, "_text")]).filter(firsts), "_text")
    del key
    # a table with no rows joins nothing: not joined (a left join of 5.7M keys costs 0.4 s even so)
    domain = pl.col("domain").fill_null("") if domains.height else pl.lit("")
    string = pl.coalesce("sid", "_text") if sids.height else pl.col("_text")
    made = []
    while pending:
        part = pending.pop()  # from the last chunk: pop() lets the list's hold on it go
        if sids.height:
            part = part.join(sids.rename({"text_id": "_sid"}), on="_sid", how="left", maintain_order="left")
        if domains.height:
            part = part.join(domains, on="dom_ix", how="left", maintain_order="left")
        made.append(part.select(pl.format("{}:{}", domain, string.fill_null("")).alias("name")))
        del part
        return_freed_memory()
    # one chunk (its views copied, not the text): readers gather names by code, which across
    # chunks copies the text of every name gathered
    keys = pl.concat(made[::-1], rechunk=True) if made else pl.DataFrame(schema={"name": pl.String})
    del made
    if domains.height or sids.height:
        name_of_key, named_first = first_appearance(keys)
        keys = keys.filter(named_first)
        del named_first
        code = name_of_key.gather(key_code)
        del name_of_key
    else:  # every name is ":" + a distinct text: one name per key already, its code the key's
        code = key_code
    del key_code
    table = keys.with_row_index("name_code").with_columns(pl.col("name_code").cast(pl.Int64))
    # the names' views held once, not in `keys` beside the table's through the copy below
    del keys
    labelled_ = _one_chunk(labelled_.insert_column(5, code.alias("name_code")))
    return labelled_, table


def _by_chunk(frame: pl.DataFrame, text: str) -> list[pl.DataFrame]:
    """`frame` cut where its column `text` changes chunk (about a million rows a piece at most),
    each piece's text referring to its own chunks' buffers only."""
    pieces: list[list[pl.Series]] = [[]]
    rows = [0]
    for c in frame[text].get_chunks():
        if rows[-1] and rows[-1] + len(c) > CHUNK_ROWS:
            pieces.append([])
            rows.append(0)
        pieces[-1].append(c)
        rows[-1] += len(c)
    others = frame.drop(text)
    out, at = [], 0
    for chunks, n in zip(pieces, rows):
        col = pl.concat(chunks, rechunk=False) if chunks else frame[text].clear()
        out.append(others.slice(at, n).insert_column(frame.columns.index(text), col))
        at += n
    return out


CHUNK_ROWS = 1 << 20  # rows of names made at a time from the read's text


def _one_chunk(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (its only holder) with every column in one chunk, copied one column at a time and
    the read's buffers each leaves handed back: the next whole-frame operation would copy them
    all at once, and the read's (the C allocator's) would stay with it."""
    for i, c in enumerate(frame.columns):
        if frame[c].n_chunks() > 1:
            frame.replace_column(i, frame[c].rechunk())
            return_freed_memory()
    return frame


# a fixed seed: keys are compared within one process only, never stored
_SEED = 0x6B76_6965_77


def first_appearance(frame: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """(code, first): each row's code, 0.. in order of the first row with equal values in every
    column of `frame`, and whether the row is that first one.

    One 64-bit hash per row, then integers only. Rows that share a hash with an earlier row are
    compared with it column by column, so a collision is found, never merged: then the codes
    come from an exact group-by instead (slower, same result).
    """
    n = frame.height
    if n == 0:
        return pl.Series("code", [], dtype=pl.Int64), pl.Series("first", [], dtype=pl.Boolean)
    # a column with one value throughout (no domains, no registered strings) tells no rows apart
    varying = [c for c in frame.columns if not _constant(frame[c])]
    if not varying:
        return pl.Series("code", np.zeros(n, dtype=np.int64)), pl.Series("first", np.arange(n) == 0)
    h = _row_hash(frame.select(varying))
    is_first, shared = _first_distinct(h)
    # in numpy, in place: polars' cast, sum and difference were three columns of every row
    ranks = np.cumsum(is_first, dtype=np.int64)
    ranks -= 1
    first, rank = pl.Series("first", is_first), pl.Series("rank", ranks)
    del is_first, ranks
    # only the rows whose hash another row shares are looked at: each first one of them is the
    # head of the later ones (a join over every row would hash millions of distinct labels again)
    rows = pl.Series("row", shared)
    at = pl.DataFrame([rows, h.gather(rows).alias("h"), first.gather(rows), rank.gather(rows).alias("rank")])
    repeats = at.filter(~pl.col("first"))
    heads = at.filter(pl.col("first")).select("h", pl.col("rank").alias("code"), pl.col("row").alias("head"))
    repeats = repeats.join(heads, on="h", how="left")
    if repeats.height:
        cols = frame.columns
        mine = frame.select(pl.all().gather(repeats["row"]))
        theirs = frame.select(pl.all().gather(repeats["head"]))
        same = pl.DataFrame({c: mine[c].eq_missing(theirs[c]) for c in cols}).select(pl.all_horizontal(pl.all()))
        if not same.to_series().all():
            return _first_appearance_exact(frame)
        code = rank.scatter(repeats["row"], repeats["code"])
    else:
        code = rank
    return code.alias("code"), first.alias("first")


def _constant(col: pl.Series) -> bool:
    """Whether every value of an integer column is the same one (or every value is null)."""
    nulls = col.null_count()
    if nulls == len(col):
        return True
    return not nulls and col.dtype.is_integer() and col.min() == col.max()


def _row_hash(frame: pl.DataFrame) -> pl.Series:
    """Each column hashed alone and the hashes mixed: a struct of the columns hashes 3-4 times
    slower (0.5 s for a dense trace's 5.7M keys, the text's hash alone 0.12 s). Equal rows hash
    equal; an unequal pair that does not is caught by first_appearance's comparison. A large
    frame is hashed a slice per thread (a value's hash is its own, wherever it lies)."""
    n, columns = frame.height, frame.columns
    h = np.empty(n, dtype=np.uint64)

    def hashed(at: int, end: int) -> None:
        part = frame.slice(at, end - at)
        mine = h[at:end]
        for i, c in enumerate(columns):
            x = part[c].hash(_SEED).to_numpy()
            if i:
                mine *= _MIX
                mine ^= x  # wraps modulo 2**64, as a hash combine should
            else:
                mine[:] = x

    parts = KEY_THREADS if n >= KEYS_APART else 1
    in_slices(hashed, even_bounds(n, parts), KEY_THREADS)
    return pl.Series("h", h)


_MIX = np.uint64(0x100000001B3)  # the 64-bit FNV prime: an odd multiplier, so no bits are lost
KEY_THREADS = 4  # threads hashing a large frame's keys at once
SHORT_ROWS = CHUNK_ROWS // 4  # labels a thread gives short names at a time (short_labels)
KEYS_APART = 1 << 18  # keys from which they are hashed on threads
GATHER_ROWS = 1 << 20  # ranges whose parents Nesting.frame finds on one thread at a time


def _first_distinct(h: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(`h.is_first_distinct()`, the rows whose value another row shares, ascending), sorting
    first: only those rows go through a hash table. polars' own probes a table of every distinct
    value, which on 5.7M mostly distinct hashes (a dense trace's labels) is 1.7 s against 0.3 s
    this way."""
    v = h.to_numpy()
    s = np.sort(v)
    shared = s[1:][s[1:] == s[:-1]]
    first = np.ones(len(v), dtype=bool)
    rows = np.zeros(0, dtype=np.int64)
    if shared.size:
        rows = np.flatnonzero(h.is_in(pl.Series(shared).implode()).to_numpy())
        first[rows] = h.gather(rows).is_first_distinct().to_numpy()
    return first, rows


def _first_appearance_exact(frame: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    groups = (
        frame.with_row_index("_row")
        .group_by(frame.columns, maintain_order=True)
        .agg(pl.col("_row"))
        .with_row_index("code")
        .select(pl.col("code").cast(pl.Int64), "_row")
        .explode("_row")
        .sort("_row")
    )
    code = groups["code"]
    return code.alias("code"), code.is_first_distinct().alias("first")


@derived
def labels(trace: Trace) -> pl.DataFrame:
    """name_code -> name, its `label` (the text after `domain:`), whether it is an op marker,
    and whether it is a module call torch.profiler recorded (`module`: a layer range, never a
    phase). Whether a library opened it is `library_ranges`', asked of the labels that need it."""
    n = labelled_ranges(trace)[1]
    if "name" not in n.columns:  # the labels alone (`_label_only`): every range in the default domain
        return _with_flags(n, pl.lit(""))
    # `label` shares the name's bytes where it can: in the default domain (`:text`, nearly every
    # range) it is a slice at a fixed offset, which polars keeps as views of the name; a split
    # would copy five million op labels (~600 MB on a dense trace). Other domains are split.
    default = pl.col("name").str.starts_with(":")
    if n.select(default.all()).item():
        # every range in the default domain (the usual trace): no filtered copy of each part and
        # no merge of the two (each a copy of 5.6M names' views on a dense trace, at the
        # Overview's highest point), and the empty domain's answers are constants
        return _with_flags(n.with_columns(pl.col("name").str.slice(1).alias("label")), pl.lit(""))
    return _labels_by_domain(n)


def _with_flags(n: pl.DataFrame, domain: pl.Expr) -> pl.DataFrame:
    """The names `n` (with their `label`) and labels' flags (marker, module), `domain` the ranges'
    domain."""
    return n.with_columns(_op_markers(n["label"]).alias("marker"), (domain == MODULE_DOMAIN).alias("module"))


def _labels_by_domain(n: pl.DataFrame) -> pl.DataFrame:
    """`labels` of the names `n`, the default domain's and the others' made apart and merged."""
    default = pl.col("name").str.starts_with(":")
    plain = n.filter(default).with_columns(pl.col("name").str.slice(1).alias("label"), pl.lit("").alias("domain"))
    parts = pl.col("name").str.splitn(":", 2)
    other = n.filter(~default).with_columns(
        parts.struct.field("field_1").fill_null("").alias("label"),
        parts.struct.field("field_0").fill_null("").alias("domain"),
    )
    return _with_flags(plain.merge_sorted(other, key="name_code"), pl.col("domain")).drop("domain")


def library_ranges(labels: pl.DataFrame) -> pl.Series:
    """Whether a library opened each of `labels` (rows of `labels()`): its domain is a library's
    or its label reads as one. Asked only where it is read (the phases' user ranges, a few
    hundred; the Timeline's kinds): over a dense trace's 5.6M labels it was ~0.2 s of a core that
    `kernels` and the Overview never read."""
    # the domain is what _labels_by_domain splits from the name (the text before its first `:`,
    # the whole name without one), tested by prefix: splitting made the rest of every name too,
    # a copy of all their text (+0.7 GB in the explorer's worker on a dense trace). One anchored
    # pattern for every domain: a prefix test and an equality per domain were 24 passes over the
    # names (0.9 of range_kinds' 1.0 CPU s on dense_x25's 5.6M names; 0.2 s as one pattern)
    domain = (
        pl.col("name").str.contains(LIBRARY_DOMAIN_RE).fill_null(False)
        if "name" in labels.columns
        else pl.lit(False)  # the labels alone (`_label_only`): each in the default domain
    )
    library = domain | pl.col("label").str.contains(LIBRARY_LABEL_RE)
    return labels.select(library.alias("library")).to_series()


@derived
def user_codes(trace: Trace) -> pl.DataFrame:
    """The name codes of user ranges (labels that are no op marker): a few hundred rows, so a
    table that asks nothing else of the labels (the NVTX tree) is made without them held (every
    range's name: 0.7 GB on the dense 1.1M-kernel trace)."""
    return labels(trace).filter(~pl.col("marker")).select("name_code")


@derived
def range_kinds(trace: Trace) -> np.ndarray:
    """Each name code's range kind (0 user range, 1 op marker, 2 library), by name code (the
    codes are 0..n-1): what the Timeline's range rows read of the labels, so they are made
    without every range's name held."""
    lab = labels(trace)
    kind = pl.when(library_ranges(lab)).then(2).when(pl.col("marker")).then(1).otherwise(0)
    cls = lab.select("name_code", kind.cast(pl.Int8).alias("kind"))
    if not cls["name_code"].is_sorted():
        cls = cls.sort("name_code")
    return cls["kind"].to_numpy()


@derived
def short_labels(trace: Trace) -> tuple[pl.DataFrame, np.ndarray]:
    """(the distinct short names of the labels, sorted: column `short`; each name code's index
    among them, by name_code). A label's short name is its op for an op marker (`aten::mm,
    op_id = 7, seq = 3, sizes = ...` -> `aten::mm`), else the label: the NVTX tree and the
    Timeline's range rows name a range by it. With autograd shapes nearly every range has a
    label of its own (5.6 million on the dense 1.1M-kernel trace) and a few hundred short
    names, so both views take these codes instead of each slicing, sorting and joining every
    label again."""
    lab = labels(trace)
    if lab.height == 0:
        return pl.DataFrame(schema={"short": pl.String}), np.zeros(0, dtype=np.int32)
    if not lab["name_code"].is_sorted() or lab["name_code"][-1] != lab.height - 1 or lab["name_code"][0] != 0:
        lab = lab.sort("name_code")
        if lab["name_code"].to_list() != list(range(lab.height)):
            raise ValueError("NVTX name codes are not dense")  # names() numbers them 0..n-1
    # the text before the first comma (a slice, not a regex: 5.6M labels), cut from the bytes:
    # str.find gives a byte offset and str.slice counts characters
    label = pl.col("label")
    short = (
        pl.when(label.str.contains(", op_id = |, seq = "))
        .then(label.cast(pl.Binary).bin.head(label.str.find(",", literal=True)).cast(pl.String))
        .otherwise(label)
        .fill_null("")
    )
    # a piece of labels at a time (SHORT_ROWS), each piece's short names numbered among its own
    # distinct ones and renumbered once the whole trace's are known: the short name of every
    # label at once and its join were 0.5 GB at the worker's peak on the dense trace. A few
    # pieces at once: one after another was one core's work (1.15 s of the explorer's worker on
    # 16 cores)

    def numbered(lo: int, hi: int) -> tuple[pl.DataFrame, np.ndarray]:
        piece = lab.slice(lo, hi - lo).select(short.alias("short"))
        own = piece.unique().with_row_index("_own")
        return own, piece.join(own, on="short", how="left", maintain_order="left")["_own"].to_numpy()

    bounds = [(at, min(at + SHORT_ROWS, lab.height)) for at in range(0, lab.height, SHORT_ROWS)]
    parts = in_slices(numbered, bounds, KEY_THREADS)
    distinct = pl.concat([own.select("short") for own, _ in parts]).unique().sort("short").with_row_index("_short")
    codes = [
        own.join(distinct, on="short", how="left", maintain_order="left")["_short"].cast(pl.Int32).to_numpy()[local]
        for own, local in parts
    ]
    return distinct.select("short"), np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)


def codes_are_rows(table: pl.DataFrame) -> bool:
    """Whether the names `table`'s name codes are its row numbers (0..n-1 in order): a code's
    name is then a gather, not a join."""
    codes, n = table["name_code"], table.height
    return bool(n) and codes[0] == 0 and codes[n - 1] == n - 1 and codes.is_sorted()


def with_names(trace: Trace, frame: pl.DataFrame, out: str = "name", table: pl.DataFrame | None = None) -> pl.DataFrame:
    """`frame` with each name_code's name in column `out` (null for a code with none), in
    `frame`'s order; `table`: names(trace), held by a caller that let the ranges go."""
    table = names(trace) if table is None else table
    n = table.height
    if codes_are_rows(table):
        # a gather, not a join against millions of names; from one chunk, where a gather of text
        # copies its 16-byte views (across the read's chunks or the cache file's row groups it
        # costs up to 30x as much: 6 CPU s for 5.6M names)
        code = pl.col("name_code")
        return frame.with_columns(
            pl.lit(table["name"].rechunk()).gather(pl.when(code.is_between(0, n - 1)).then(code)).alias(out)
        )
    return frame.join(table.rename({"name": out}), on="name_code", how="left", maintain_order="left")


# projection_ranges' rules, for a table of labelled ranges (labelled()'s columns) in memory or
# read in part: a range ended on another thread is left out; an open one ends at the last timestamp
ONE_THREAD = ~pl.col("other_thread")


def last_timestamp(all_ranges: pl.DataFrame | pl.LazyFrame) -> int | None:
    """Where a range still open ends: the last start or end of any range (`labelled` rows)."""
    return all_ranges.lazy().select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).collect().item()


def ended(hi: int | None) -> pl.Expr:
    """The `end` of a range, `hi` (last_timestamp) where it is open."""
    return pl.col("end").fill_null(pl.lit(hi, dtype=pl.Int64))


@derived
def projection_ranges(trace: Trace) -> pl.DataFrame:
    """Ranges as nsys's projection reports use them: one thread only, null end -> last timestamp."""
    all_ranges = labelled(trace)
    hi = last_timestamp(all_ranges)
    # the usual trace (no cross-thread ranges, every range closed) shares labelled()'s columns
    r = all_ranges if all_ranges.select(ONE_THREAD.all()).item() else all_ranges.filter(ONE_THREAD)
    if r["end"].null_count():
        r = r.with_columns(ended(hi))
    return r.drop("other_thread")


def user_ranges(trace: Trace) -> pl.DataFrame:
    """Instances of user ranges (op markers excluded): id, label, start, end, global_tid."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(
            schema={"id": pl.Int64, "label": pl.String, "start": pl.Int64, "end": pl.Int64, "global_tid": pl.Int64}
        )
    users = labels(trace).filter(~pl.col("marker")).select("name_code", "label")
    return (
        projection_ranges(trace)
        .join(users, on="name_code", how="inner")
        .select("id", "label", "start", "end", "global_tid")
    )


def release(trace: Trace) -> None:
    """Let the trace's ranges, their names and labels and the nesting go (what was made from them
    stays; a later question makes them again, equal): for a command that has made every table
    it needs of them and goes on with other work."""
    trace.store.drop(labelled_ranges, labels, projection_ranges, projection_tree, projection_nesting)


@derived
def projection_tree(trace: Trace) -> pl.DataFrame:
    """nest() of the push/pop projection ranges, computed once per trace."""
    return projection_nesting(trace).tree


def nest(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add `depth`, `parent` (id of the tightest enclosing range on the same thread) and `pos`
    (the range's place in start order on its thread, a preorder of the nesting).

    Valid for families that nest (push/pop on one thread). Ties of identical intervals
    become a chain in id order.
    """
    return Nesting.nested(ranges).tree


def _nest_rows(ranges: pl.DataFrame) -> np.ndarray:
    """The rows of `ranges` by thread, then start, longer first, then id.

    Exports list ranges in start order (interleaving threads); then a stable split by thread is
    that order unless equal starts need their ends and ids compared: checked, and only when the
    check fails are the rows sorted on all four keys (a multi-column sort of millions of rows)."""
    return _nest_sorted(ranges)[0]


def _nest_sorted(ranges: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(`_nest_rows`, and global_tid, start and end in that order): the check gathers them
    already, and nesting reads them."""
    keys, desc = ["global_tid", "start", "end", "id"], [False, False, True, False]
    if ranges.height >= 2 and ranges["start"].is_sorted() and not ranges["global_tid"].null_count():
        order, t = _by_thread(ranges["global_tid"].to_numpy())
        st, en = (ranges[c].to_numpy()[order] for c in keys[1:3])
        same_thread = t[1:] == t[:-1]
        later = (st[1:] > st[:-1]) | ((st[1:] == st[:-1]) & (en[1:] < en[:-1]))
        # the ids decide only between equal intervals (rare): looked up for those pairs alone
        tied = np.flatnonzero(~later & same_thread)
        if tied.size:
            ids = ranges["id"].to_numpy()
            later[tied] = (
                (st[tied + 1] == st[tied]) & (en[tied + 1] == en[tied]) & (ids[order[tied + 1]] > ids[order[tied]])
            )
        if bool(np.all(later | ~same_thread)):
            return order, t, st, en
    order = _sorted_rows(ranges, keys, desc)
    t, st, en = (ranges[c].to_numpy()[order] for c in keys[:3])
    return order, t, st, en


def _by_thread(tids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the rows in a stable order by thread, their threads in that order)."""
    n = len(tids)
    cut = np.flatnonzero(tids[1:] != tids[:-1]) + 1
    if len(cut) * 8 > n:  # threads interleaved row by row: a radix sort of each row's thread's index
        uniq = np.sort(pl.Series(tids).unique().to_numpy())  # a few threads: hashed, not sorted
        thread = np.searchsorted(uniq, tids)
        order = np.argsort(thread.astype(np.int16) if len(uniq) < (1 << 15) else thread, kind="stable")
        return order, tids[order]
    # an export lists each thread's ranges in runs (hundreds on a dense trace, not millions): each
    # thread's runs in turn, in their order, are that order, made from the runs alone
    lo = np.concatenate([[0], cut])
    size = np.diff(np.append(lo, n))
    runs = np.argsort(tids[lo], kind="stable")
    size, lo = size[runs], lo[runs]
    rows = _row_type(n)
    order = np.arange(n, dtype=rows) + np.repeat((lo - (np.cumsum(size) - size)).astype(rows), size)
    return order, np.repeat(tids[lo], size)


def _sorted_rows(ranges: pl.DataFrame, keys: list[str], desc: list[bool]) -> np.ndarray:
    rows = pl.int_range(pl.len(), dtype=pl.Int64).sort_by(keys, descending=desc, maintain_order=True)
    return ranges.select(rows.alias("_row"))["_row"].to_numpy()


def _nest_order(ranges: pl.DataFrame) -> pl.DataFrame:
    """`ranges` by thread, then start, longer first, then id (`_nest_rows`)."""
    return ranges[_nest_rows(ranges)]


def nest_depths(ranges: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """`ranges` in nest()'s order and each one's nest() depth, without the parents (for a view
    that draws ranges by depth and asks nothing about their ancestors)."""
    r = _nest_order(ranges)
    depth = np.zeros(r.height, dtype=np.int64)
    tid, start, end = (r[c].to_numpy() for c in ("global_tid", "start", "end"))
    for lo, hi in _thread_spans(tid):
        depth[lo:hi] = _depths_in_thread(start[lo:hi], end[lo:hi])
    return r, depth


def _row_type(n: int) -> type[np.signedinteger]:
    """The integer type of row numbers among `n` rows (and of depths, which are fewer)."""
    return np.int32 if n < (1 << 31) else np.int64


def _threads(tid: np.ndarray) -> dict[int, tuple[int, int]]:
    """global_tid -> [lo, hi) of its rows, in rows sorted by thread."""
    return {int(tid[lo]): (int(lo), int(hi)) for lo, hi in _thread_spans(tid)} if len(tid) else {}


def _thread_spans(tid: np.ndarray) -> zip:
    """[lo, hi) of each thread's rows in rows sorted by thread."""
    cut = np.flatnonzero(tid[1:] != tid[:-1]) + 1
    return zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(tid)]]), strict=True)


def _depths_in_thread(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of one thread's ranges in (start, longer first) order: the number of earlier ranges
    still open when it starts, i.e. its place in start order less the ranges that ended by then
    (end <= its start; for a zero-length range, end < its start), not counting zero-length
    ranges at its own start, which sort after it."""
    longer = end > start
    every = bool(longer.all())  # the usual trace: no zero-length range, and no key array to make
    key = start if every else np.where(longer, start, start - 1)
    ends = np.sort(end, kind="stable")  # timsort: ends come nearly sorted
    closed = np.searchsorted(ends, key, side="right")
    del ends, key  # before the next array of a thread's rows is made: at most two at a time
    zero = end == start
    if not every and zero.any():
        zs = np.sort(start[zero])
        at_start = np.searchsorted(zs, start, side="right") - np.searchsorted(zs, start, side="left")
        closed = closed - np.where(longer, at_start, 0)
    # made in place: a second array of a thread's rows would be the nesting's peak
    np.subtract(np.arange(len(start), dtype=np.int64), closed, out=closed)
    return closed


# a thread of at least LEVEL_ROWS ranges nested less than LEVEL_PASSES deep finds its ranges'
# parents level by level (_nest_thread); on a small one each level costs more in calls than rows
LEVEL_PASSES, LEVEL_ROWS = 32, 1 << 12


def _levels(depth: np.ndarray, top: int) -> list[np.ndarray]:
    """The rows of each depth 0..top, in order: one pass over the depths a level, each level's
    rows made as row numbers of the smallest type (a sort of every row by depth makes 64-bit
    ones, the nesting's peak)."""
    rows = _row_type(len(depth))
    return [np.flatnonzero(depth == d).astype(rows, copy=False) for d in range(top + 1)]


def _nest_thread(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depth, parent row or -1) of one thread's ranges in (start, longer first) order.

    The parent is the last earlier range one level up (in preorder, the ancestor at depth d is
    the last range of depth d before it): one stable sort by depth and one sorted search.
    """
    m = len(start)
    depth = _depths_in_thread(start, end)
    top = int(depth.max(initial=0))
    if m >= LEVEL_ROWS and top < LEVEL_PASSES and depth.min(initial=0) >= 0:
        # a shallow nesting (the usual trace): the rows of each depth in preorder, each row's
        # parent the last row one level up before it, searched among that level's rows alone
        # (a pass over every row per level to find the parents costs 1.6x as much)
        levels = _levels(depth, top)
        parent = np.full(m, -1, dtype=_row_type(m))
        for up, rows in zip(levels, levels[1:]):
            at = np.searchsorted(up, rows) - 1
            parent[rows] = np.where(at >= 0, up[np.maximum(at, 0)], -1) if up.size else -1
        return depth, parent
    # rows of each depth, in preorder (a stable radix sort where the depths fit 16 bits)
    small = depth.max(initial=0) < (1 << 15) and depth.min(initial=0) >= 0
    by_depth = np.argsort(depth.astype(np.int16) if small else depth, kind="stable")
    sorted_key = depth[by_depth] * m + by_depth
    q = by_depth[depth[by_depth] > 0]  # the asked rows in key order: the search walks forward
    hit = np.searchsorted(sorted_key, (depth[q] - 1) * m + q, side="left") - 1
    parent = np.full(m, -1, dtype=np.int64)
    ok = hit >= 0
    cand = by_depth[np.maximum(hit, 0)]
    ok &= depth[cand] == depth[q] - 1
    parent[q[ok]] = cand[ok]
    return depth, parent


def ancestor_at(tree: pl.DataFrame, rows: pl.DataFrame, pos: str, level: str, cols: dict[str, str]) -> pl.DataFrame:
    """For each row (global_tid, `pos` in the tree's preorder, `level`), columns of the tree's
    range at depth `level` on the path to the range at `pos` (its ancestor, or itself), renamed
    by `cols` ({tree column: new name}); nulls when there is none. One join_asof: in preorder,
    that ancestor is the last range of that depth at or before `pos`."""
    # (depth, pos) packed into one key, so the asof join groups by thread only (grouping by depth
    # too would make a group per level: slow when ranges nest thousands deep)
    right = tree.select(
        "global_tid",
        (pl.col("depth").cast(pl.Int64) * _POS + pl.col("pos")).alias("_akey"),
        pl.col("depth").cast(pl.Int64).alias("_adepth"),
        *[pl.col(c).alias(n) for c, n in cols.items()],
    )
    left = rows.with_columns(pl.col(level).cast(pl.Int64)).with_columns(
        (pl.col(level) * _POS + pl.col(pos)).alias("_akey")
    )
    got = left.sort("_akey").join_asof(
        right.sort("_akey"), on="_akey", by="global_tid", strategy="backward", check_sortedness=False
    )
    miss = pl.col("_adepth").is_null() | (pl.col("_adepth") != pl.col(level))  # no range at that depth
    return got.with_columns(*[pl.when(miss).then(None).otherwise(pl.col(n)).alias(n) for n in cols.values()]).drop(
        "_akey", "_adepth"
    )


_POS = 1 << 32  # positions on one thread stay below this

INNERMOST_SCHEMA = pl.Schema(
    {"call_id": pl.Int64, "global_tid": pl.Int64, "id": pl.Int64, "ipos": pl.Int64, "idepth": pl.Int64}
)


def innermost(tree: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """(call_id, global_tid, id, ipos, idepth) of the innermost range of `tree` (a nest() result) with
    start <= call start and end >= call end, for the calls (call_id, global_tid, start, end)
    that have one (Nesting.innermost_rows)."""
    if tree.height == 0 or calls.height == 0:
        return pl.DataFrame(schema=INNERMOST_SCHEMA)
    rows = Nesting.of(tree).innermost_rows(calls)
    hit = np.flatnonzero(rows >= 0)
    found = tree[rows[hit]].select("global_tid", "id", pl.col("pos").alias("ipos"), pl.col("depth").alias("idepth"))
    return (
        found.with_columns(pl.Series("call_id", calls["call_id"].to_numpy()[hit]))
        .select(list(INNERMOST_SCHEMA))
        .cast(INNERMOST_SCHEMA)
    )


@dataclass(frozen=True)
class Nesting:
    """A nest() result as arrays, for asking many calls at once which ranges enclose them.

    Rows are the tree's (thread, preorder); `parent` is the row of each range's parent (-1 for
    a root). Enclosure then is a walk up parent rows, done for all calls together in numpy:
    the innermost range around a call is the last range starting at or before it on its
    thread, or the first ancestor of that one that ends at or after the call; the nearest range
    of a kind above any row comes from pointer jumping (log2 of the depth rounds, whatever the
    number of ranges).

    The ranges are held once, in their own order: `order` maps a tree row to its row of
    `ranges` (None: they are the tree already), and the tree frame is made only when asked
    (`tree`), so nesting five million ranges adds five arrays, not a sorted copy of every column.
    """

    ranges: pl.DataFrame
    order: np.ndarray | None  # per tree row: its row of `ranges`; None where they are the same
    parent: np.ndarray
    depth: np.ndarray
    start: np.ndarray
    end: np.ndarray
    threads: dict[int, tuple[int, int]]  # global_tid -> [lo, hi) rows

    @classmethod
    def of(cls, tree: pl.DataFrame, parent: np.ndarray | None = None) -> Nesting:
        """The Nesting of a nest() result; `parent` rows when the caller has them."""
        if parent is None:
            rows = tree.select("id").with_row_index("_row")
            parent = (
                tree.select(pl.col("parent").alias("id"))
                .join(rows, on="id", how="left", maintain_order="left")["_row"]
                .cast(pl.Int64)
                .fill_null(-1)
                .to_numpy()
            )
        tid = tree["global_tid"].to_numpy()
        depth = tree["depth"].cast(pl.Int64).to_numpy()
        return cls(tree, None, parent, depth, tree["start"].to_numpy(), tree["end"].to_numpy(), _threads(tid))

    @classmethod
    def nested(cls, ranges: pl.DataFrame) -> Nesting:
        """Nest `ranges` (push/pop ranges with id, global_tid, start, end): one sort, then numpy
        per thread; `ranges` is kept as it is, not copied in the tree's order."""
        order, tid, start, end = _nest_sorted(ranges)
        n = len(order)
        rows = _row_type(n)  # row numbers and depths in 32 bits where they fit: half the memory
        order = order.astype(rows, copy=False)
        spans, threads = (list(_thread_spans(tid)) if n else []), _threads(tid)
        del tid  # a thread's own arrays are made next: the threads of every row go first
        depth = np.zeros(n, dtype=rows)
        parent = np.full(n, -1, dtype=rows)
        for lo, hi in spans:
            depth[lo:hi], parent[lo:hi] = _nest_thread(start[lo:hi], end[lo:hi])
            if lo:
                at = parent[lo:hi]
                at[at >= 0] += lo
        return cls(ranges, order, parent, depth, start, end, threads)

    def rows(self, tree_rows: np.ndarray) -> np.ndarray:
        """The rows of `ranges` of these tree rows."""
        return tree_rows if self.order is None else self.order[tree_rows]

    def in_tree_order(self, values: np.ndarray) -> np.ndarray:
        """Per-row `values` of `ranges` (in its order) in the tree's order."""
        return values if self.order is None else values[self.order]

    def tree_rows(self, rows: np.ndarray) -> np.ndarray:
        """The tree rows of these rows of `ranges` (the inverse of `rows`)."""
        if self.order is None:
            return rows
        tree_of = np.empty(len(self.order), dtype=np.int64)
        tree_of[self.order] = np.arange(len(self.order), dtype=np.int64)
        return tree_of[rows]

    def take(self, columns: list[str], tree_rows: np.ndarray | pl.Series | None = None) -> pl.DataFrame:
        """`columns` of `ranges` at these tree rows (every row, in the tree's order, if None); a
        null tree row (a Series with nulls) gives a row of nulls."""
        if tree_rows is None:
            tree_rows = np.arange(len(self.depth), dtype=np.int64)
        if isinstance(tree_rows, pl.Series):
            idx = tree_rows if self.order is None else pl.Series("_o", self.order).gather(tree_rows)
            return self.ranges.select(pl.col(c).gather(idx) for c in columns)
        return self.ranges.select(columns)[self.rows(tree_rows)]

    @property
    def tree(self) -> pl.DataFrame:
        """nest()'s frame: the ranges in the tree's order with `pos`, `depth` and `parent` (the
        parent's id) added. Made on each call when the ranges are held in their own order."""
        if self.order is None:
            return self.ranges
        return self.frame(self.ranges.columns, pos=True)

    def frame(self, columns: list[str], pos: bool = False) -> pl.DataFrame:
        """`columns` of the ranges (`id` among them) in the tree's order, with `depth` and
        `parent` (the parent's id, null at a root) added, and `pos` with `pos`: the tree's frame
        narrowed to what a caller reads (every column of five million ranges in the tree's
        order is 0.4 GB)."""
        extra = ["pos"] if pos else []
        if self.order is None:
            return self.ranges.select(*columns, *extra, "depth", "parent")
        r = self.ranges.select(columns)[self.order]
        if pos:
            at = np.zeros(len(self.depth), dtype=np.int64)
            for lo, hi in self.threads.values():
                at[lo:hi] = np.arange(hi - lo, dtype=np.int64)
            r = r.with_columns(pl.Series("pos", at))
        ids = r["id"].to_numpy()
        up, n = self.parent, len(self.parent)
        rows = np.maximum(up, 0)
        parent = np.empty(n, dtype=ids.dtype)  # the parent's id, any where none (nulled below)

        def gathered(lo: int, hi: int) -> None:
            np.take(ids, rows[lo:hi], out=parent[lo:hi], mode="clip")  # rows in range: no checked copy

        # in slices on threads: five million ranges' random reads were 0.4 s of one core (the
        # slices allocate nothing: see summary_stats.small_blocks)
        in_slices(gathered, even_bounds(n, -(-n // GATHER_ROWS)), KEY_THREADS)
        return r.with_columns(
            pl.Series("depth", self.depth, dtype=pl.Int64),
            pl.Series("parent", parent).cast(r.schema["id"]),
        ).with_columns(pl.when(pl.Series(up >= 0)).then(pl.col("parent")).alias("parent"))

    def innermost_rows(self, calls: pl.DataFrame) -> np.ndarray:
        """Per call (global_tid, start, end; in the calls' order): the row of the innermost range
        with start <= call start and end >= call end, -1 where none."""
        n = calls.height
        row = np.full(n, -1, dtype=np.int64)
        if n == 0 or not self.threads:
            return row
        tid = calls["global_tid"].to_numpy()
        cs = calls["start"].to_numpy()
        ce = calls["end"].to_numpy()
        order = np.argsort(tid, kind="stable")
        st = tid[order]
        cut = np.flatnonzero(np.diff(st)) + 1
        for part in np.split(order, cut):
            span = self.threads.get(int(tid[part[0]]))
            if span is None:
                continue
            lo, hi = span
            got = np.searchsorted(self.start[lo:hi], cs[part], side="right") - 1
            row[part] = np.where(got >= 0, got + lo, -1)
        # climb while the range ends before the call does (ancestors end no earlier)
        todo = np.flatnonzero(row >= 0)
        todo = todo[self.end[row[todo]] < ce[todo]]
        while todo.size:
            up = self.parent[row[todo]]
            row[todo] = up
            todo = todo[up >= 0]
            todo = todo[self.end[row[todo]] < ce[todo]]
        return row

    @functools.cached_property
    def crossing_threads(self) -> np.ndarray:
        """The threads (global_tid) whose push/pop ranges do not nest: a range that ends after the
        range it is nested in (one never popped, which nsys ends at the last timestamp, crosses
        the ranges that were open around it) or before it starts. On such a thread depth and
        parent are not the ranges around a range; where a thread has none, every range lies
        inside its parent, so its ancestors are exactly the earlier ranges still open at its
        start: the nesting is right."""
        parts, step = [], 1 << 18
        for lo in range(0, len(self.parent), step):  # in slices: no array of every range beside the nesting
            par, end = self.parent[lo : lo + step], self.end[lo : lo + step]
            out = ((par >= 0) & (end > self.end[np.maximum(par, 0)])) | (end < self.start[lo : lo + step])
            parts.append(np.flatnonzero(out) + lo)
        bad = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if not bad.size:
            return np.zeros(0, dtype=np.int64)
        tids = np.array(list(self.threads), dtype=np.int64)
        first = np.array([span[0] for span in self.threads.values()], dtype=np.int64)  # each thread's first row
        order = np.argsort(first)
        return np.unique(tids[order][np.searchsorted(first[order], bad, side="right") - 1])

    def around(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (index into `rows`, row) of the ranges at or above each row (-1: none): a call's
        enclosing ranges from its innermost_rows(), one numpy step per level."""
        at = np.flatnonzero(rows >= 0)
        cur = rows[at]
        idx, found = [], []
        while at.size:
            idx.append(at)
            found.append(cur)
            cur = self.parent[cur]
            keep = cur >= 0
            at, cur = at[keep], cur[keep]
        if not idx:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(idx), np.concatenate(found)

    # Up to this many levels, per-row answers are made top-down one level at a time (each row
    # touched once); deeper nestings (a push never popped in a loop) use pointer jumping.
    LEVELS_TOP_DOWN = 64

    @functools.cached_property
    def levels(self) -> list[np.ndarray] | None:
        """Rows of each depth (0, 1, ...), or None when the nesting is deeper than LEVELS_TOP_DOWN."""
        if len(self.depth) == 0 or self.too_deep:
            return None
        return _levels(self.depth, int(self.depth.max()))

    @property
    def too_deep(self) -> bool:
        """Whether the nesting is deeper than LEVELS_TOP_DOWN (or a depth unknown): its answers
        are made by pointer jumping, not level by level."""
        d = self.depth
        return len(d) > 0 and (int(d.max()) >= self.LEVELS_TOP_DOWN or int(d.min()) < 0)

    def nearest(self, mask: np.ndarray) -> np.ndarray:
        """Per row: the row of the nearest range at or above it where `mask` holds, -1 where none."""
        return self.answers([(mask, False)])[0]

    def answers(self, asks: list[tuple[np.ndarray, bool]]) -> list[np.ndarray]:
        """`outermost(mask)` or `nearest(mask)` of each (mask, outermost?) in `asks`: made in one
        walk down the levels, each level's parents read once for all of them."""
        n = len(self.depth)
        if self.levels is None:
            return [
                (self._outermost_by_jumps(m) if outer else self._nearest_by_jumps(m)).astype(_row_type(n), copy=False)
                for m, outer in asks
            ]
        # one slot past the rows holds -1: a root's parent points there, so no row is tested for one
        got = [np.full(n + 1, -1, dtype=_row_type(n + 1)) for _ in asks]
        for rows in self.levels:
            par = self.parent[rows]
            par = np.where(par >= 0, par, n)
            for (mask, outer), answer in zip(asks, got):
                up = answer[par]
                if outer:
                    answer[rows] = np.where(up >= 0, up, np.where(mask[rows], rows, -1))
                else:
                    answer[rows] = np.where(mask[rows], rows, up)
        return [a[:n] for a in got]

    def fold_up(self, value: np.ndarray, op: np.ufunc) -> None:
        """Fold each row's `value` into its parent's with `op` (np.add, np.minimum, ...), the
        deepest level first, in place: each row then holds `op` over its whole subtree. Only
        where `levels` is not None."""
        assert self.levels is not None
        for rows in reversed(self.levels[1:]):
            op.at(value, self.parent[rows], value[rows])

    def _nearest_by_jumps(self, mask: np.ndarray) -> np.ndarray:
        near = np.where(mask, np.arange(len(mask), dtype=np.int64), self.parent)
        while True:
            at = np.flatnonzero(near >= 0)
            bad = at[~mask[near[at]]]
            if bad.size == 0:
                return near
            near[bad] = near[near[bad]]

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """Per row: the row of the outermost range at or above it where `mask` holds, -1 where none."""
        return self.answers([(mask, True)])[0]

    def _outermost_by_jumps(self, mask: np.ndarray) -> np.ndarray:
        near = self._nearest_by_jumps(mask)
        up = np.full(len(mask), -1, dtype=np.int64)
        kinds = np.flatnonzero(mask)
        par = self.parent[kinds]
        has = par >= 0
        up[kinds[has]] = near[par[has]]
        top = np.where(up >= 0, up, np.arange(len(mask), dtype=np.int64))
        while True:
            nxt = top[top]
            if np.array_equal(nxt, top):
                break
            top = nxt
        return np.where(near >= 0, top[np.maximum(near, 0)], -1)


@derived
def projection_nesting(trace: Trace) -> Nesting:
    """The push/pop projection ranges nested (projection_tree() is its frame)."""
    ranges = projection_ranges(trace)
    # the usual trace has push/pop ranges only: nested as they are, not filtered into a copy
    push_pop = pl.col("style") == "PushPop"
    return Nesting.nested(ranges if ranges.select(push_pop.all()).item() else ranges.filter(push_pop))


PAIR_BYTES = 400  # memory per (call, range) pair through the reports' joins, with headroom


class TooManyPairs(Exception):
    """Pairing every call with every range around it would not fit the memory budget (ranges
    nested thousands deep: a push never popped inside a loop)."""

    def __init__(self, pairs: int, limit: int, depth: int):
        self.pairs, self.limit, self.depth = pairs, limit, depth
        super().__init__(
            f"nests NVTX ranges {depth:,} deep, so pairing each kernel with every range around it "
            f"takes {pairs:,} rows, more than the {limit:,} the memory budget allows (--max-memory)"
        )


def pair_limit() -> int:
    total, _ = budget()
    return (total or 8 << 30) // PAIR_BYTES


def innermost_within_budget(nesting: Nesting, calls: pl.DataFrame) -> np.ndarray:
    """`nesting.innermost_rows(calls)`, once the (call, range) pairs they stand for (each call
    with every range at or above its innermost one) are counted: TooManyPairs past the memory
    budget, whether or not the caller goes on to make them."""
    rows = nesting.innermost_rows(calls)
    depth = _pairs_of(nesting, rows)
    pairs, limit = int(depth.sum()), pair_limit()
    if pairs > limit:
        raise TooManyPairs(pairs, limit, int(depth.max()))
    return rows


def _pairs_of(nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """Per call: how many ranges hold it, from its innermost row (-1: none)."""
    return np.where(rows >= 0, nesting.depth[np.maximum(rows, 0)] + 1, 0) if len(nesting.depth) else rows * 0


def enclosing(ranges: pl.DataFrame, calls: pl.DataFrame, tree: pl.DataFrame | Nesting | None = None) -> pl.DataFrame:
    """Pairs (call_id, range id) for every range on the call's thread with
    range.start <= call.start and range.end >= call.end.

    `calls` has call_id, global_tid, start, end. Push/pop ranges go through the nesting
    (innermost open range, then its ancestors); start/end ranges through an interval join.
    The pairs grow with the nesting depth (the nsys reports that need them are defined over
    them), so their number is counted first and TooManyPairs raised past the memory budget.
    """
    pp = ranges.filter(pl.col("style") == "PushPop")
    se = ranges.filter(pl.col("style") != "PushPop")
    out = []
    held = np.zeros(calls.height, dtype=np.int64)  # per call: its push/pop pairs
    if pp.height and calls.height:
        nesting = Nesting.of(nest(pp) if tree is None else tree) if not isinstance(tree, Nesting) else tree
        crossing = pl.Series(nesting.crossing_threads)
        if crossing.len():  # threads whose ranges do not nest: taken as any ranges, like start/end ones
            se = pl.concat([se, pp.filter(pl.col("global_tid").is_in(crossing.implode()))])
            nested = (
                calls.select(~pl.col("global_tid").is_in(crossing.implode()).fill_null(False)).to_series().to_numpy()
            )
            rows = np.full(calls.height, -1, dtype=np.int64)
            rows[nested] = innermost_within_budget(nesting, calls.filter(pl.Series(nested)))
        else:
            rows = innermost_within_budget(nesting, calls)
        held = _pairs_of(nesting, rows)
        at, found = nesting.around(rows)
        out.append(
            pl.DataFrame(
                {"call_id": calls["call_id"].to_numpy()[at], "id": nesting.take(["id"], found)["id"].to_numpy()},
                schema={"call_id": pl.Int64, "id": pl.Int64},
            )
        )
    if se.height and calls.height:
        out.append(_enclosing_any(se, calls, held))
    if not out:
        return pl.DataFrame(schema={"call_id": pl.Int64, "id": pl.Int64})
    return pl.concat(out)


def around(ranges: pl.DataFrame, calls: pl.DataFrame, outermost: bool = False) -> pl.DataFrame:
    """(call_id, id) of the innermost (or outermost) range of `ranges` around each call that has
    one. Push/pop ranges go through their own nesting (so `ranges` can be any subset: the user
    ranges, the backward nodes), start/end ranges through an interval join; the one that starts
    later (earlier, for the outermost) wins. Never more rows than calls per family, whatever
    the depth."""
    pp = ranges.filter(pl.col("style") == "PushPop")
    se = ranges.filter(pl.col("style") != "PushPop")
    parts = []
    if pp.height and calls.height:
        tree = nest(pp.select("id", "global_tid", "start", "end"))
        inner = innermost(tree, calls)
        if outermost:
            inner = ancestor_at(
                tree, inner.drop("id").with_columns(pl.lit(0, dtype=pl.Int64).alias("top")), "ipos", "top", {"id": "id"}
            )
        parts.append(inner.select("call_id", "id"))
    if se.height and calls.height:
        parts.append(_enclosing_any(se, calls))
    if not parts:
        return pl.DataFrame(schema={"call_id": pl.Int64, "id": pl.Int64})
    found = pl.concat(parts).join(ranges.select("id", "start", "end"), on="id", how="left")
    found = found.sort(["call_id", "start", "end"], descending=[False, outermost, not outermost])
    return found.group_by("call_id", maintain_order=True).agg(pl.col("id").last()).select("call_id", "id")


def _enclosing_any(ranges: pl.DataFrame, calls: pl.DataFrame, held: np.ndarray | None = None) -> pl.DataFrame:
    """(call_id, id) of every range of `ranges` (which need not nest) on a call's thread with
    start <= the call's start and end >= its end, in the calls' order, then the ranges'. Made
    by containment's passes over ranges and calls in one (thread, start) order, a range first at
    an equal start: the work grows with the rows and the pairs found, where a join of each call
    with every range of its thread held calls x ranges rows (a million calls under a thousand
    ranges: a billion). With `held` (per call, the pairs already made of other ranges), the
    pairs are counted with those against the memory budget, as enclosing() counts its own:
    start/end ranges left open in a loop pair each later call with every one of them."""
    if ranges.select(pl.any_horizontal(pl.col("global_tid", "start", "end").is_null().any())).item():
        ranges = ranges.drop_nulls(["global_tid", "start", "end"])  # as the join's comparisons left them out
    # only the calls of threads with ranges (those of a thread with none would only be sorted
    # and searched): the rows of `calls` kept, where some are left out
    kept: np.ndarray | None = None
    useful = (
        pl.col("global_tid").is_in(ranges["global_tid"].unique().implode())
        & pl.all_horizontal(pl.col("start", "end").is_not_null())
    ).fill_null(False)
    if not calls.select(useful.all()).item():
        kept = calls.select(useful).to_series().to_numpy()
        calls = calls.filter(useful)
    nr = ranges.height
    tid = np.concatenate([ranges["global_tid"].to_numpy(), calls["global_tid"].to_numpy()])
    start = np.concatenate([ranges["start"].to_numpy(), calls["start"].to_numpy()])
    end = np.concatenate([ranges["end"].to_numpy(), calls["end"].to_numpy()])
    is_call = np.arange(len(tid)) >= nr
    order = np.lexsort((is_call, start, tid))
    del start
    y = containment.thread_end_rank(tid, end)[order]
    del tid, end
    call_at = is_call[order]
    asks = np.flatnonzero(call_at)
    limit = None if held is None else pair_limit() - int(held.sum())
    try:
        q, p = containment.earlier_holders(y, np.flatnonzero(~call_at), asks, limit)
    except containment.TooMany as e:
        assert held is not None
        total = held.copy()  # every call's pairs, whether kept here or not
        at = order[asks] - nr
        total[at if kept is None else np.flatnonzero(kept)[at]] += e.counts
        raise TooManyPairs(int(total.sum()), pair_limit(), int(total.max())) from None
    del y, call_at
    call, rng = order[q] - nr, order[p]
    del q, p, order
    pairs = np.lexsort((rng, call))
    return pl.DataFrame(
        [
            pl.Series("call_id", calls["call_id"].to_numpy()[call[pairs]], dtype=pl.Int64),
            pl.Series("id", ranges["id"].to_numpy()[rng[pairs]], dtype=pl.Int64),
        ]
    )


def user_range_open_at(users: pl.DataFrame, probes: pl.DataFrame) -> pl.DataFrame:
    """(call_id, id): for each probe (call_id, global_tid, t) the innermost of `users` (user
    ranges: id, global_tid, start, end, style) open at t on a thread of the probe's process that
    has user ranges. The autograd engine's thread has none of its own: its work happens inside
    the range the main thread has open (`backward_pass`), and both the range tree and the
    kernel table place it there."""
    schema = pl.Schema({"call_id": pl.Int64, "id": pl.Int64})
    if users.height == 0 or probes.height == 0:
        return pl.DataFrame(schema=schema)
    threads = users.select("global_tid", (pl.col("global_tid") & PID_MASK).alias("_pid")).unique()
    p = (
        probes.with_columns((pl.col("global_tid") & PID_MASK).alias("_pid"))
        .drop("global_tid")
        .join(threads, on="_pid", how="inner")
        .select("call_id", "global_tid", pl.col("t").alias("start"), pl.col("t").alias("end"))
    )
    return around(users, p).select(list(schema)).cast(schema)  # the innermost, whatever the depth
