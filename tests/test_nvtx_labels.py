"""NVTX labels keyed by first appearance (the hashed numbering equals an exact one, collisions included) and the nesting's shortcuts (top-down answers, the start-order split) against their plain forms."""

from __future__ import annotations

import re

import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.trace import open_trace

from conftest import KINETO_TRACES, LM_TRACES, PUBLIC, PUBLIC_TRACES, SAMPLES

TRACES = [*PUBLIC_TRACES, *LM_TRACES[:3], *KINETO_TRACES[:3]]


def _keys(path) -> pl.DataFrame:
    """The (domain, registered string id, inline text) of every range of a real trace."""
    ev = open_trace(path, use_cache=False).nvtx_events
    return ev.select(
        pl.col("domain_id"), pl.col("text_id"), pl.col("text").cast(pl.String), pl.col("global_tid")
    ).with_columns(pl.col("text").str.slice(0, 12).alias("prefix"))


def _numbered_in_python(rows: list[tuple]) -> tuple[list[int], list[bool]]:
    seen: dict[tuple, int] = {}
    codes, first = [], []
    for r in rows:
        first.append(r not in seen)
        codes.append(seen.setdefault(r, len(seen)))
    return codes, first


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_first_appearance_numbers_rows_as_a_dictionary_would(path):
    keys = _keys(path)
    if keys.height == 0:
        pytest.skip("no NVTX")
    # ["domain_id", "text_id"]: integers only, often one value throughout (no domains, no registered strings)
    for cols in (["domain_id", "text_id", "text"], ["prefix"], ["global_tid", "prefix"], ["domain_id", "text_id"]):
        frame = keys.select(cols)
        code, first = nv.first_appearance(frame)
        want_code, want_first = _numbered_in_python(frame.rows())
        assert code.to_list() == want_code
        assert first.to_list() == want_first
        # short prefixes repeat: there are repeats to compare, not only first rows
        if cols == ["prefix"] and frame.height > 1000:
            assert not all(want_first)


@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: p.name)
def test_keys_hashed_a_slice_per_thread_are_numbered_as_by_one(path, monkeypatch):
    """A large frame's keys are hashed a slice per thread: the codes are a dictionary's, as
    where they are hashed at once (the frames here made large enough at a test's size)."""
    keys = _keys(path)
    if keys.height < 2:
        pytest.skip("no NVTX")
    for cols in (["domain_id", "text_id", "text"], ["global_tid", "prefix"]):
        frame = keys.select(cols)
        want = nv.first_appearance(frame)
        monkeypatch.setattr(nv, "KEYS_APART", 2)
        got = nv.first_appearance(frame)
        monkeypatch.undo()
        assert got[0].to_list() == want[0].to_list() == _numbered_in_python(frame.rows())[0]
        assert got[1].to_list() == want[1].to_list()


@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: p.name)
def test_hash_collisions_are_found_not_merged(path, monkeypatch):
    frame = _keys(path).select("prefix", "text")
    want = nv.first_appearance(frame)
    # every row hashing to one of two values: nearly every row collides with a different one
    monkeypatch.setattr(nv, "_row_hash", lambda f: pl.Series("h", [0, 1] * (f.height // 2) + [0] * (f.height % 2)))
    got = nv.first_appearance(frame)
    assert got[0].to_list() == want[0].to_list()
    assert got[1].to_list() == want[1].to_list()
    assert got[0].max() + 1 == frame.unique().height


def test_names_are_one_per_distinct_label_in_first_appearance_order():
    path = TRACES[0]
    t = open_trace(path, use_cache=False)
    lab, names = nv.labelled_ranges(t)
    assert names["name"].n_unique() == names.height
    assert names["name_code"].to_list() == list(range(names.height))
    # codes in order of each name's first range
    firsts = lab.with_row_index("row").group_by("name_code").agg(pl.col("row").min()).sort("row")
    assert firsts["name_code"].to_list() == list(range(names.height))


@pytest.mark.parametrize("path", [*PUBLIC_TRACES[:2], *LM_TRACES[:2]], ids=lambda p: p.name)
def test_nearest_and_outermost_top_down_equal_pointer_jumping(path):
    """The two ways Nesting answers "which range of this kind is above each row" agree on real
    nestings, for the kinds attribution asks about and for a random scattering of rows."""
    import numpy as np

    t = open_trace(path, use_cache=False)
    nest = nv.projection_nesting(t)
    if nest.levels is None:
        pytest.skip("deeper than the top-down limit")
    labels = nv.labels(t)
    codes = nest.tree["name_code"].to_numpy()
    by_code = np.zeros(int(max(codes.max(initial=0), labels["name_code"].max() or 0)) + 1, dtype=bool)
    by_code[labels["name_code"].to_numpy()] = labels["marker"].to_numpy()
    rng = np.random.default_rng(7)
    masks = [by_code[codes], ~by_code[codes], rng.random(len(codes)) < 0.3]
    assert len(nest.levels) >= 3
    for mask in masks:
        assert np.array_equal(nest.nearest(mask), nest._nearest_by_jumps(mask))
        assert np.array_equal(nest.outermost(mask), nest._outermost_by_jumps(mask))
        # and one row checked by walking its parents
        row = int(np.flatnonzero(nest.depth == nest.depth.max())[0])
        chain = [row]
        while nest.parent[chain[-1]] >= 0:
            chain.append(int(nest.parent[chain[-1]]))
        hits = [r for r in chain if mask[r]]
        assert nest.nearest(mask)[row] == (hits[0] if hits else -1)
        assert nest.outermost(mask)[row] == (hits[-1] if hits else -1)


@pytest.mark.parametrize("path", [*PUBLIC_TRACES[:2], *LM_TRACES[:2]], ids=lambda p: p.name)
def test_parents_a_pass_per_level_equal_the_sorted_search(path, monkeypatch):
    """A large thread's shallow nesting finds its parents a pass per level, a small or deep one
    by a search over (depth, row): the same depths and parents on real nestings."""
    import numpy as np

    ranges = nv.projection_ranges(open_trace(path, use_cache=False))
    ranges = ranges.filter(pl.col("style") == "PushPop")
    monkeypatch.setattr(nv, "LEVEL_ROWS", 0)
    passes = nv.Nesting.nested(ranges)
    monkeypatch.setattr(nv, "LEVEL_ROWS", 1 << 62)
    searched = nv.Nesting.nested(ranges)
    assert passes.depth.max() >= 2
    assert np.array_equal(passes.depth, searched.depth) and np.array_equal(passes.parent, searched.parent)


@pytest.mark.parametrize("path", [*PUBLIC_TRACES, *LM_TRACES[:2]], ids=lambda p: p.name)
def test_nest_order_equals_the_four_key_sort(path):
    """The shortcut for ranges listed in start order (a stable split by thread) gives exactly the
    sorted order, also when equal starts need their ends and ids, and when the rows are not in
    start order at all."""
    keys, desc = ["global_tid", "start", "end", "id"], [False, False, True, False]
    r = nv.projection_ranges(open_trace(path, use_cache=False)).select("id", "global_tid", "start", "end")
    if r.height < 2:
        pytest.skip("too few ranges")
    by_start = r.sort("start", "id")
    # equal starts whose order the split alone would get wrong: shorter first, then longer
    ties = by_start.head(50).with_columns(pl.lit(0, dtype=pl.Int64).alias("start"))
    for frame in (by_start, r.reverse(), pl.concat([ties, by_start.slice(50)])):
        assert nv._nest_order(frame).equals(frame.sort(keys, descending=desc))


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in [*PUBLIC_TRACES, *LM_TRACES]
        if p.name.startswith(("nsysai_2gpu_fsdp_before", "dlrm", "lm-small_ctx256_b"))
    ],
    ids=lambda p: p.name,
)
def test_names_made_chunk_by_chunk_equal_names_made_at_once(path, monkeypatch):
    """labelled_ranges makes the names from the read's text a few chunks at a time (letting each
    go): a read in many small chunks, made into names 300 rows at a time, gives the same ranges
    and names as a read in one chunk made at once (traces with registered strings, a domain)."""
    from kview.io import nsys_reader

    def read(chunk_rows):
        t = open_trace(path, use_cache=False)
        monkeypatch.setattr(t.source, "nvtx_events", lambda: nsys_reader.nvtx_events(t.source.db, chunk_rows))
        return t

    monkeypatch.setattr(nv, "CHUNK_ROWS", 1 << 40)
    whole = read(1 << 30)
    assert whole.nvtx_events["text"].n_chunks() == 1
    want = nv.labelled_ranges(whole)
    monkeypatch.setattr(nv, "CHUNK_ROWS", 300)
    pieces = read(200)
    assert pieces.nvtx_events["text"].n_chunks() > 10
    made: list[int] = []
    by_chunk = nv._by_chunk

    def counted(*a):
        out = by_chunk(*a)
        made.append(len(out))
        return out

    monkeypatch.setattr(nv, "_by_chunk", counted)
    got = nv.labelled_ranges(pieces)
    assert made[0] > 3  # made in several pieces
    for g, w in zip(got, want):
        assert g.equals(w)
    assert got[0].height > 1000 and got[1].height > 10


@pytest.mark.parametrize("threads", [1, 3, 7])
def test_the_nvtx_read_on_any_number_of_threads_gives_the_rows_in_file_order(threads):
    """A read's parts run on a thread each and their batches arrive interleaved: on 1, 3 or 7
    threads of small parts the NVTX rows equal the file's, in rowid order (as sqlite3 reads them)."""
    import sqlite3

    from kview.io import nsys_reader

    path = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
    t = open_trace(path, use_cache=False)
    got = nsys_reader.nvtx_events(t.source.db, 397, threads)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        want = con.execute(
            "SELECT rowid, start, text, globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71, 75) ORDER BY rowid"
        ).fetchall()
    assert len(want) > 3 * 397 * threads  # several reads of `threads` parts each
    assert got.select("id", "start", "text", "global_tid").rows() == want


def test_a_domain_created_on_two_threads_counts_its_ranges_once_per_creation(tmp_path):
    """As nsys joins them: a range meets every domain-create row of its domainId in its process,
    so a domain created again on another thread of that process names its ranges twice (the
    sample's one CCCL range, with the domain created again as `CCCL2`)."""
    import shutil
    import sqlite3

    path = tmp_path / "two_creations.sqlite"
    shutil.copy(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", path)
    with sqlite3.connect(path) as con:
        pid_bits = "globalTid - (globalTid & 16777215)"  # the process's bits, another thread's id
        con.execute(
            f"INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) SELECT start + 5, "
            f"eventType, text || '2', {pid_bits} + 7, domainId FROM NVTX_EVENTS WHERE eventType = 75"
        )
        created = con.execute("SELECT count(*), min(domainId) FROM NVTX_EVENTS WHERE eventType = 75").fetchone()
        in_it = con.execute(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType != 75 AND domainId = ?", (created[1],)
        ).fetchone()[0]
        ranges = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)").fetchone()[0]
    assert created[0] == 2 and in_it >= 1
    t = open_trace(path, use_cache=False)
    lab = nv.with_names(t, nv.labelled(t))
    assert lab.height == ranges + in_it
    domains = lab.filter(pl.col("name").str.starts_with("CCCL"))["name"].str.split(":").list.first()
    assert domains.value_counts().sort("name")["count"].to_list() == [in_it, in_it]


def test_short_names_made_a_piece_at_a_time_equal_those_made_at_once(monkeypatch):
    """The short names are numbered a piece of labels at a time (a few pieces at once, on
    threads where the cores allow) and renumbered among the whole trace's: pieces of 500 labels
    give the names and codes of the labels taken at once."""
    import numpy as np

    trace = open_trace(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", use_cache=False)
    whole = nv.short_labels(trace)
    assert nv.labels(trace).height > 2000 and whole[0].height > 20
    assert nv.labels(trace).height <= nv.SHORT_ROWS  # one piece
    monkeypatch.setattr(nv, "SHORT_ROWS", 500)
    trace.store.drop(nv.short_labels)
    pieces = nv.short_labels(trace)
    assert pieces[0].equals(whole[0]) and np.array_equal(pieces[1], whole[1]) and pieces[1].dtype == np.int32


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_op_markers_are_the_labels_the_marker_regex_matches(path):
    """labels' `marker` (the regex's literal alternatives first, the regex on the rest) is
    is_op_marker of every label: op markers, user ranges and library ranges alike."""
    t = open_trace(path, use_cache=False)
    if not t.has("NVTX_EVENTS") or nv.labelled(t).height == 0:
        pytest.skip("no NVTX")
    labels = nv.labels(t)
    assert labels["marker"].to_list() == [nv.is_op_marker(lab) for lab in labels["label"]]


@pytest.mark.parametrize("path", [*TRACES, PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"], ids=lambda p: p.name)
def test_library_ranges_are_the_library_domains_and_labels(path):
    """library_ranges (asked of the labels that need it, not a column of labels()) is, for every
    label, its domain being a library's or its label matching LIBRARY_LABEL_RE."""
    t = open_trace(path, use_cache=False)
    if not t.has("NVTX_EVENTS") or nv.labelled(t).height == 0:
        pytest.skip("no NVTX")
    labels = nv.labels(t)
    want = [
        name.split(":", 1)[0] in nv.LIBRARY_DOMAINS or re.search(nv.LIBRARY_LABEL_RE, label) is not None
        for name, label in labels.select("name", "label").iter_rows()
    ]
    assert nv.library_ranges(labels).to_list() == want
    if path.name.startswith("nsysai_2gpu_fsdp"):  # NCCL's own ranges
        assert sum(want) > 0


def test_a_range_ended_on_another_thread_is_labelled_but_not_projected(tmp_path):
    """labelled() keeps whether a range ended on another thread (`other_thread`, the read's end
    thread id let go); the projection reports, as nsys's, leave such a range out."""
    import sqlite3

    from deep_nvtx import GLOBAL_TID, make

    path = make(tmp_path / "cross.sqlite", 4, leak=False)
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, endGlobalTid, text) VALUES (?, ?, ?, ?, ?, ?)",
        (1_000_100, 1_030_000, 60, GLOBAL_TID, GLOBAL_TID + 1, "handed over"),
    )
    con.commit()
    con.close()
    trace = open_trace(path, use_cache=False)
    lab = nv.with_names(trace, nv.labelled(trace))
    assert "end_global_tid" not in lab.columns and "event_type" not in lab.columns
    assert lab.height == 9 and lab.filter("other_thread")["name"].to_list() == [":handed over"]
    assert lab.filter("other_thread")["style"].to_list() == ["StartEnd"]
    proj = nv.projection_ranges(trace)
    assert proj.height == 8 and "other_thread" not in proj.columns
    assert proj.columns == ["id", "start", "end", "global_tid", "name_code", "style"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_labels_of_the_default_domain_alone_equal_the_split_by_domain(path):
    """labels() of a trace whose every range is in the default domain (each name `:text`) skips
    the split by domain and the merge: the same table as the split gives."""
    trace = open_trace(path, use_cache=False)
    names = nv.names(trace)
    if names.height == 0 or not names["name"].str.starts_with(":").all():
        pytest.skip("no NVTX, or ranges of a named domain")
    got = nv.labels(trace)
    assert got.equals(nv._labels_by_domain(names))
    assert got.columns == ["name_code", "name", "label", "marker", "module"]
    assert got["marker"].any() or got.height < 100


def test_library_ranges_split_the_domain_at_the_first_colon():
    """A library's domain is the text before a name's first `:`, or the whole of a name without
    one, as labels() splits it: prefixes, lookalikes and a missing name each as the rule says."""
    names = ["NCCL:AllReduce", "NCCL", "NCCLx:op", ":NCCL:x", "cuDNN:conv:fwd", ":ncclAllReduce", "NCCL_x", None]
    # a domain alone but for a line's end, a domain that is another's prefix, and one longer
    names += ["NCCL\n", "cuBLAS:gemm", "cuBLASLt", "cuBLASLtx:y"]
    labels = pl.DataFrame({"name": names}).with_columns(
        pl.col("name").str.splitn(":", 2).struct.field("field_1").fill_null("").alias("label")
    )
    want = [
        n is not None and (n.split(":", 1)[0] in nv.LIBRARY_DOMAINS or re.search(nv.LIBRARY_LABEL_RE, lab) is not None)
        for n, lab in labels.iter_rows()
    ]
    assert want == [True, True, False, False, True, True, False, False, False, True, True, False]
    assert nv.library_ranges(labels).to_list() == want


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_labels_made_alone_are_the_names_labels(path):
    """`kview kernels` without a cache (`_label_only`) makes the labels alone, not the names:
    the labels, their flags, the ranges' codes and the names asked after are the same as where
    the names are made, on traces with and without domains and registered strings."""
    whole = open_trace(path, use_cache=False)
    alone = open_trace(path, use_cache=False)
    alone.only_attribution = alone.ranges_only_for_attribution = True
    want = nv.labels(whole)
    got = nv.labels(alone)
    made_alone = "name" not in nv.labelled_ranges(alone)[1].columns
    assert not made_alone or want["name"].str.starts_with(":").all()
    assert got.equals(want.drop("name") if made_alone else want)
    assert nv.labelled(alone).equals(nv.labelled(whole))
    assert nv.names(alone).equals(nv.names(whole))
    assert nv.library_ranges(got).equals(nv.library_ranges(want))


def test_labels_alone_where_a_trace_has_no_domains():
    """The labels-alone table is taken where it can be (bert's ranges are all in the default
    domain, without registered strings), and a trace with a frame cache still makes and keeps
    the names."""
    path = SAMPLES / "bert-2l_seq128_train_nsys.sqlite"
    alone = open_trace(path, use_cache=False)
    alone.only_attribution = alone.ranges_only_for_attribution = True
    assert nv.labelled_ranges(alone)[1].columns == ["name_code", "label"]
    assert nv.names(alone)["name"].str.starts_with(":").all()
    cached = open_trace(path, use_cache=True)
    cached.only_attribution = cached.ranges_only_for_attribution = True
    assert nv.labelled_ranges(cached)[1].columns == ["name_code", "name"]


def test_short_names_are_the_text_before_the_first_comma_in_characters(tmp_path):
    """An op marker's short name is its label up to the first comma, also where text before it
    is not ASCII (the comma is found as a byte offset): each label's short name equals Python's
    own split of the label."""
    import shutil
    import sqlite3

    path = tmp_path / "unicode.sqlite"
    shutil.copy(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", path)
    with sqlite3.connect(path) as con:
        for text in ("ünï, seq = 3", "Straße::mm, op_id = 5, seq = 9", "名前, op_id = 2", "é, no marker"):
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
                "SELECT start, end, 59, ?, globalTid FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1",
                (text,),
            )
    trace = open_trace(path, use_cache=False)
    distinct, short_of = nv.short_labels(trace)
    lab = nv.labels(trace).sort("name_code")
    got = distinct["short"].gather(short_of).to_list()
    want = [
        t.split(",")[0] if (", op_id = " in t or ", seq = " in t) else t for t in lab["label"].fill_null("").to_list()
    ]
    assert got == want
    assert {"ünï", "Straße::mm", "名前", "é, no marker"} <= set(got)
