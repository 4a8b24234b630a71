"""Attribution on the project's own captures: the seed catalogues' rows, and an independent
loop-based check of direction and backward layer on every kernel."""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.trace import open_trace

from conftest import PUBLIC, SAMPLES

BERT = SAMPLES / "bert-2l_seq128_train_nsys.sqlite"
DLRM = SAMPLES / "dlrm_b32768_train_nsys.sqlite"
NCF = SAMPLES / "ncf_b1048576_train_nsys.sqlite"
LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


@pytest.fixture(scope="module")
def tables():
    return {p: attribute(open_trace(p, use_cache=False)) for p in (BERT, DLRM, NCF, LM)}


def test_bert_qkv_projections_forward_and_backward(tables):
    a = tables[BERT]
    for enc in ("Enc_0", "Enc_1"):
        for proj in ("Q_Proj", "K_Proj", "V_Proj"):
            layer = f"{enc}:Attn:SelfAttn:{proj}"
            rows = a.filter(pl.col("Layer") == layer)
            f = rows.filter(pl.col("Direction") == "fprop")
            assert f.height == 1
            assert f.row(0, named=True) | {} and f["Op"][0] == "linear"
            assert f["Params"][0] == "M=1024,N=(4,128),K=1024" and f["Category"][0] == "gemm"
            assert f["NVTX Path"][0] == f"profiled_step > forward_pass > {enc} > Attn > SelfAttn > {proj}"
            assert f["FLOPs"][0] == 2 * 1024 * 512 * 1024
            b = rows.filter(pl.col("Direction") == "bprop")
            # data gradient and weight gradient GEMMs (plus the bias-gradient reduction)
            assert b.filter(pl.col("Category") == "gemm").height >= 2
            assert set(b["Op"]) == {"linear"} and set(b["Params"]) == {"M=1024,N=(4,128),K=1024"}


def test_bert_optimizer_and_loss_rows(tables):
    a = tables[BERT]
    opt = a.filter(pl.col("Direction") == "optim")
    assert opt.height > 100 and set(opt["Category"]) <= {"optimizer", "gemm", "reduction", "memset", "memcpy"}
    assert a.filter((pl.col("Layer") == "Masked_LM_Loss") & (pl.col("Direction") == "fprop"))[
        "Op"
    ].unique().to_list() == ["cross_entropy"]
    sm = a.filter(pl.col("Layer").str.ends_with("SelfAttn:SoftMax") & (pl.col("Direction") == "fprop"))
    assert sm.height == 2 and set(sm["Params"]) == {"[4,16,128,128];[];[]"} and set(sm["Category"]) == {"softmax"}


def test_dlrm_embedding_and_interaction_rows(tables):
    a = tables[DLRM]
    for i in (0, 1, 12, 25):
        f = a.filter((pl.col("Layer") == f"Embedding_{i}") & (pl.col("Direction") == "fprop"))
        assert f.height == 1
        assert (f["Op"][0], f["Params"][0]) == ("embedding", f"I=(32768),E=({100000 + 100 * i},128)")
        b = a.filter((pl.col("Layer") == f"Embedding_{i}") & (pl.col("Direction") == "bprop"))
        assert b.height >= 5 and set(b["Op"]) == {"embedding"}  # sort/scan/reduce kernels of embedding_backward
    inter = a.filter((pl.col("Layer") == "Interaction") & (pl.col("Op") == "bmm"))
    assert inter.filter(pl.col("Direction") == "fprop")["Params"].to_list() == ["B=32768,M=27,N=27,K=128"]
    assert inter.filter(pl.col("Direction") == "bprop").height >= 2
    top = a.filter((pl.col("Layer") == "Top_MLP") & (pl.col("Op") == "linear") & (pl.col("Direction") == "fprop"))
    assert top["Params"].to_list()[:2] == ["M=1024,N=32768,K=480", "M=1024,N=32768,K=1024"]


def test_ncf_embedding_rows(tables):
    a = tables[NCF]
    want = {
        "MF_User_Embedding": "I=(1048576),E=(138493,64)",
        "MF_Item_Embedding": "I=(1048576),E=(26744,64)",
        "MLP_User_Embedding": "I=(1048576),E=(138493,128)",
        "MLP_Item_Embedding": "I=(1048576),E=(26744,128)",
    }
    for layer, params in want.items():
        rows = a.filter(pl.col("Layer") == layer)
        assert rows.filter(pl.col("Direction") == "fprop")["Params"].to_list() == [params]
        b = rows.filter(pl.col("Direction") == "bprop")
        assert b.height >= 5 and set(b["Params"]) == {params}


# ---- independent check: plain loops over the SQLite rows, no kview code ----------------------

PHASES = {"warmup", "profiled_step", "forward_pass", "backward_pass", "optimizer_step"}


def _truth(path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    nv = con.execute(
        "SELECT start, coalesce(end, start), globalTid, coalesce(text, (SELECT value FROM StringIds "
        "WHERE id = textId)) FROM NVTX_EVENTS WHERE eventType = 59"
    ).fetchall()
    by_tid: dict[int, tuple] = {}
    for tid in {r[2] for r in nv}:
        rows = sorted((r for r in nv if r[2] == tid), key=lambda r: (r[0], -r[1]))
        by_tid[tid] = (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), [r[3] for r in rows])

    def enclosing(tid, s, e):
        st, en, names = by_tid.get(tid, (np.array([]), np.array([]), []))
        idx = np.flatnonzero((st <= s) & (en >= e))
        return [(int(st[i]), int(en[i]), names[i]) for i in idx]  # outer to inner

    fwd_by_seq: dict[int, list] = {}
    for s, _e, tid, text in nv:
        m = re.match(r"^([^,]+), seq = (\d+)", text or "")
        if m and "Backward" not in m[1] and not m[1].startswith("autograd::"):
            fwd_by_seq.setdefault(int(m[2]), []).append((s, tid))
    kern = con.execute(
        "SELECT k.start, r.start, r.end, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
        "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId ORDER BY k.start"
    ).fetchall()
    out = []
    for kstart, rs, re_, tid in kern:
        stack = enclosing(tid, rs, re_)
        names = [n for _, _, n in stack]
        bare = [n.split(",")[0] for n in names]
        if "optimizer_step" in names or any(b.startswith("Optimizer.") for b in bare):
            d = "optim"
        elif "backward_pass" in names or any(
            b.endswith("Backward0") or b.endswith("Backward1") or b.startswith("autograd::engine") for b in bare
        ):
            d = "bprop"
        elif "forward_pass" in names:
            d = "fprop"
        else:
            d = "-"
        layer = None
        if d == "bprop":
            seqs = [(s, int(m[1])) for s, _, n in stack if (m := re.search(r"Backward\d*, seq = (\d+)", n))]
            if not seqs:  # inside evaluate_function, after its node range: that node is its first child
                ev = [(s, e) for s, e, n in stack if n.startswith("autograd::engine::evaluate_function")]
                if ev:
                    s0, e0 = ev[-1]
                    kids = [
                        (s, int(m[1]))
                        for s, e, _, n in ((s, e, t, n) for s, e, t, n in nv if t == tid)
                        if s0 <= s and e <= e0 and (m := re.search(r"Backward\d*, seq = (\d+)", n or ""))
                    ]
                    seqs = sorted(kids)[:1]
            if seqs:
                bstart, seq = seqs[-1]
                cands = [c for c in fwd_by_seq.get(seq, []) if c[0] <= bstart]
                if cands:
                    fs, ftid = max(cands)
                    users = [
                        n
                        for _, _, n in enclosing(ftid, fs, fs)
                        if ", op_id = " not in n and ", seq = " not in n and "::" not in n and "#" not in n
                    ]
                    layer = ":".join(n for n in users if n not in PHASES) or "-"
        out.append((kstart, d, layer))
    return out


@pytest.mark.parametrize("path", [BERT, DLRM, NCF, LM], ids=lambda p: p.stem)
def test_direction_and_backward_layer_against_independent_check(tables, path):
    a = tables[path].filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    truth = _truth(path)
    assert len(truth) == a.height
    dirs = a["Direction"].to_list()
    right = sum(d == t[1] for d, t in zip(dirs, truth))
    assert right / len(truth) >= 0.99, right / len(truth)
    layers = a["Layer"].to_list()
    bp = [(lay, t[2]) for lay, d, t in zip(layers, dirs, truth) if t[1] == "bprop" and t[2] is not None]
    assert len(bp) > 100
    ok = sum(x == y for x, y in bp)
    assert ok / len(bp) >= 0.95, (ok / len(bp), [p for p in bp if p[0] != p[1]][:5])


def test_hopper_bf16_kernels_are_tensor_core_gemm_and_attention():
    path = PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"
    a = attribute(open_trace(path, use_cache=False))
    nvjet = a.filter(pl.col("Kernel").str.starts_with("nvjet_"))
    flash = a.filter(pl.col("Kernel").str.contains("flash_fwd_kernel"))
    assert nvjet.height > 100 and set(nvjet["Category"]) == {"gemm"} and set(nvjet["TC"]) == {True}
    assert flash.height > 10 and set(flash["Category"]) == {"attention"} and set(flash["TC"]) == {True}
    nccl = a.filter(pl.col("Kernel").str.starts_with("ncclDevKernel"))
    assert nccl.height and set(nccl["Category"]) == {"communication"}
    # fp32 FFMA GEMMs of the LM sample are not tensor-core kernels
    lm = attribute(open_trace(LM, use_cache=False)).filter(pl.col("Category") == "gemm")
    assert set(lm.filter(pl.col("Kernel").str.contains("ffma|sgemm"))["TC"]) == {False}


@pytest.mark.parametrize("which", ["user ranges", "every range"])
def test_start_end_ranges_attribute_as_the_same_push_pop_ranges(tables, tmp_path, which):
    """Start/end ranges take the interval join, push/pop ones the nesting: the same ranges
    written as start/end give every kernel the same direction and path, and the same layer and
    op (written as start/end, backward work after a node's own range cannot be placed under
    its `evaluate_function` range, which only push/pop ranges nest: forward rows only then)."""
    dst = tmp_path / "startend.sqlite"
    dst.write_bytes(LM.read_bytes())
    con = sqlite3.connect(dst)
    text = "coalesce((SELECT value FROM StringIds WHERE id = textId), text)"
    marker = f"({text} LIKE '%, seq = %' OR {text} LIKE '%, op_id = %' OR {text} LIKE '%::%')"
    only = f" AND NOT {marker}" if which == "user ranges" else ""
    changed = con.execute(f"UPDATE NVTX_EVENTS SET eventType = 60 WHERE eventType = 59{only}").rowcount
    con.commit()
    con.close()
    assert changed > 100
    got = attribute(open_trace(dst, use_cache=False))
    cols = ["Idx", "Direction", "Layer", "Op", "Params", "NVTX Path"]
    want = tables[LM].select(cols)
    assert got.select("Direction", "NVTX Path").equals(want.select("Direction", "NVTX Path"))
    rows = pl.lit(True) if which == "user ranges" else pl.col("Direction") != "bprop"
    assert got.select(cols).filter(rows).equals(want.filter(rows))
    assert want.filter(rows).filter(pl.col("Layer") != "-").height > 300


@pytest.mark.parametrize("path", [LM, DLRM], ids=lambda p: p.stem)
def test_each_kernel_gets_the_runtime_call_of_its_correlation_id(path):
    """The launch call of every kernel (matched on one packed integer of process and correlation
    id) is the one SQLite's own join finds, and the two-column join kview falls back to agrees."""
    from kview.analysis.attribution import _launch_joined, gpu_ops, launch_calls, launch_of, launched_ops

    t = open_trace(path, use_cache=False)
    ops = launched_ops(t)
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    want = con.execute(
        "SELECT k.start, k.correlationId, r.start, r.end, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "AND r.globalTid / 16777216 = k.globalPid / 16777216"
    ).fetchall()
    got = ops.filter(pl.col("kind") == "kernel").select("start", "correlation", "r_start", "r_end", "global_tid")
    assert sorted(got.rows()) == sorted(want)
    assert sum(r[2] is not None for r in want) > 1000
    runtime = t.columns("runtime", ["start", "end", "global_tid", "correlation"])
    assert launch_of(gpu_ops(t), runtime).equals(_launch_joined(gpu_ops(t), launch_calls(runtime)))
    # calls out of the keys' order, one call of each ten repeated later with another time (the
    # first is the launch), a tenth of the launches missing: still the join's answer
    moved = pl.concat(
        [
            runtime.filter(pl.int_range(pl.len()) % 10 != 3).reverse(),
            runtime.gather_every(10).with_columns(pl.col("start") + 1, pl.col("end") + 1),
        ]
    )
    got = launch_of(gpu_ops(t), moved)
    assert got.equals(_launch_joined(gpu_ops(t), launch_calls(moved)))
    assert got["r_start"].null_count() > 0 and got.schema == {
        "r_start": runtime.schema["start"],
        "r_end": runtime.schema["end"],
        "global_tid": runtime.schema["global_tid"],
    }


@pytest.mark.parametrize("pack_bytes", [0, None], ids=["packed", "kept"])
@pytest.mark.parametrize("path", [LM, BERT], ids=lambda p: p.stem)
def test_a_command_that_lets_the_names_go_attributes_the_same(tables, monkeypatch, path, pack_bytes):
    """`kview kernels` lets the ranges' names go during attribution (the forward ops' text packed,
    read back for the ops kernels end up with): the same table as a trace that keeps them, with
    the NVTX read once and neither the names nor the ranges held after."""
    from kview.analysis import attribution, nvtx_ranges

    if pack_bytes is not None:  # the sample's text is small: packed as a large trace's is
        monkeypatch.setattr(attribution._OpTexts, "PACK_BYTES", pack_bytes)
        # in chunks of a few hundred labels: several compressed while the next ones are cut
        monkeypatch.setattr(attribution._OpTexts, "ROWS", 300)
    t = open_trace(path, use_cache=False)
    t.ranges_only_for_attribution = t.only_attribution = True
    read = t.source.nvtx_events
    reads = []
    monkeypatch.setattr(t.source, "nvtx_events", lambda: reads.append(1) or read())
    got = attribute(t)
    assert got.equals(tables[path])
    assert len(reads) == 1
    kept = {nvtx_ranges.labelled_ranges, nvtx_ranges.labels, nvtx_ranges.projection_nesting}
    assert not any(t.store.peek(f) is not None for f in kept)
    assert not {"kernels", "runtime"} & set(t._frames)  # the ops hold what attribution read of them
    assert got.filter(pl.col("Params") != "-").height > 100


@pytest.mark.parametrize("release", [True, False], ids=["names-go", "names-kept"])
@pytest.mark.parametrize("path", [LM, BERT, DLRM], ids=lambda p: p.stem)
def test_categorized_is_the_attributed_tables_columns_made_without_the_rest(tables, monkeypatch, path, release):
    """categorized() (what `kview overview` reads of the attribution) equals those columns of the
    whole table, and is made without it: where the names go, each op label keeps its op name only."""
    from kview.analysis import attribution

    t = open_trace(path, use_cache=False)
    t.ranges_only_for_attribution = release
    made = []
    whole = attribution._attributed
    monkeypatch.setattr(attribution, "_attributed", lambda trace, shapes: made.append(shapes) or whole(trace, shapes))
    got = attribution.categorized(t)
    assert made == [False] and t.store.peek(attribute) is None
    # the user ranges' phases are read, not their path and layer texts, which it does not show
    assert t.store.peek(attribution.user_paths) is None and t.store.peek(attribution.user_flags) is not None
    assert got.equals(tables[path].select(attribution.CATEGORIZED))
    assert got.filter(pl.col("Op") != "-").height > 100
    assert attribution.launch_ops(t).equals(got.select("Idx", "Op")) and made == [False]


@pytest.mark.parametrize("path", [LM, BERT, DLRM], ids=lambda p: p.stem)
def test_user_flags_are_user_paths_ranges_and_phases(path):
    """user_flags, made without the path and layer texts, holds user_paths' ranges and phase
    flags; once user_paths is made, it is taken from there."""
    from kview.analysis import attribution

    flags = ["uid", "in_fwd", "in_bwd", "in_opt"]
    alone = attribution.user_flags(open_trace(path, use_cache=False))
    t = open_trace(path, use_cache=False)
    whole = attribution.user_paths(t).select(flags)
    assert alone.sort("uid").equals(whole.sort("uid")) and alone.height > 10
    # one training step: its forward pass and the ranges inside it, one backward and one optimizer range
    assert alone.select(pl.col("in_fwd", "in_bwd", "in_opt").sum()).row(0) == (alone.height - 3, 1, 1)
    assert attribution.user_flags(t).equals(whole)


def test_op_fields_read_as_the_regexes_do():
    """op_fields finds the op and its shapes literally where it can: the regexes' text on every
    op label of a capture and on labels the literal reading must leave to them."""
    from kview.analysis import nvtx_ranges
    from kview.analysis.attribution import OP_ALIASES, _op_name, op_fields

    lab = pl.col("label")

    def by_regex(labels: pl.DataFrame) -> pl.DataFrame:
        return labels.select(
            "name_code",
            lab.str.extract(r"^([^,]*)", 1).str.replace(r"^aten::", "").replace(OP_ALIASES).alias("op"),
            lab.str.extract(r", sizes = (\[.*?\])(?:, input_op_ids = |$)", 1).alias("sizes"),
        )

    labels = nvtx_ranges.labels(open_trace(LM, use_cache=False)).select("name_code", "label")
    got = op_fields(labels).sort("name_code")
    assert got.equals(by_regex(labels))
    assert got.filter(pl.col("sizes").is_not_null()).height > 1000
    odd = [
        "aten::mm, seq = 3, sizes = [[8, 4], [4, 2]], input_op_ids = [(1,0), (2,0)]",
        "aten::native_layer_norm, sizes = [[2, 8], [8]]",
        "aten::mm, sizes = [[1]] trailing",
        "aten::mm, sizes = [], input_op_ids = []",
        "aten::mm, sizes = [",
        "mm,",
        "",
        None,
        "aten::é, sizes = [[1]], input_op_ids = []",  # a byte offset is no character offset
        "a, sizes = [x\n], sizes = [[2]]",  # `.` stops at a line break: the second match
        "a, sizes = [x]], input_op_ids = ], input_op_ids = ",
        "a, sizes = [x], sizes = [y]",
    ]
    edge = pl.DataFrame(
        {"name_code": range(len(odd)), "label": odd}, schema={"name_code": pl.Int64, "label": pl.String}
    )
    got = op_fields(edge).sort("name_code")
    assert got.equals(by_regex(edge))
    # the text an op is named from, alone (categorized): the same op
    heads = op_fields(edge, sizes=False).sort("name_code")
    assert heads.select("name_code", _op_name(pl.col("head"))).equals(got.select("name_code", "op"))
    assert got["op"].to_list() == ["mm", "layer_norm", "mm", "mm", "mm", "mm", "", None, "é", "a", "a", "a"]
    assert got["sizes"].to_list() == [
        "[[8, 4], [4, 2]]",
        "[[2, 8], [8]]",
        None,
        "[]",
        None,
        None,
        None,
        None,
        "[[1]]",
        "[[2]]",
        "[x]]",
        "[x], sizes = [y]",
    ]


def test_op_labels_kinds_from_the_head_are_the_regexes_on_the_label():
    """op_labels tests each label's kinds on its head (the text before its first comma), once per
    distinct head: the same answers as the anchored regexes on every whole label, on a capture's
    labels, on labels whose head is odd (no comma, non-ASCII, a line break, empty, null) and on
    more labels than the streaming engine cuts at once."""
    from kview.analysis import attribution, nvtx_ranges

    lab = pl.col("label")

    def by_regex(labels: pl.DataFrame) -> pl.DataFrame:
        return labels.with_columns(
            lab.str.extract(r", seq = (\d+)", 1).cast(pl.Int64).alias("seq"),
            lab.str.contains(r"^[^,]*Backward\d*(,|$)").alias("bwd_node"),
            lab.str.starts_with("autograd::engine::evaluate_function").alias("bwd_eval"),
            lab.str.contains(r"^Optimizer\.(step|zero_grad)#").alias("optim_marker"),
        ).with_columns(
            (
                pl.col("marker")
                & ~pl.col("bwd_node")
                & ~pl.col("bwd_eval")
                & ~pl.col("optim_marker")
                & ~lab.str.starts_with("autograd::")
                & lab.str.contains(r"^[\w:.<>]+(,|$)")
            ).alias("fwd_op")
        )

    labels = nvtx_ranges.labels(open_trace(LM, use_cache=False)).select("name_code", "label", "marker")
    odd = [
        "MulBackward0",
        "MulBackward0, seq = 5",
        "MulBackward0x, seq = 5",
        "aten::é, seq = 7, sizes = [[1]]",
        "é Backward1, seq = 2",
        "aten::mm\n, seq = 3",
        "aten::mm",
        ", seq = 4",
        "",
        None,
        "autograd::engine::evaluate_function: MulBackward0, seq = 9",
        "autograd::x, seq = 1",
        "Optimizer.step#AdamW.step",
        "Optimizer.zero_grad#SGD.zero_grad, seq = 8",
        "a<b>.c::d, seq = 6, x, seq = 7",
    ]
    edge = pl.DataFrame(
        {"name_code": range(len(odd)), "label": odd, "marker": [i % 3 != 2 for i in range(len(odd))]},
        schema={"name_code": pl.Int64, "label": pl.String, "marker": pl.Boolean},
    )
    # more labels than the streaming engine's morsel: its parts come back in the labels' order
    many = pl.concat([labels] * (300_000 // labels.height + 1)).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("name_code")
    )
    for frame in (labels, edge, many):
        got = attribution._flagged(frame)
        assert got.drop("head").equals(by_regex(frame))
        assert got["head"].cast(pl.String).equals(frame["label"].str.extract(r"^([^,]*)", 1), check_names=False)
    assert labels.height > 1000 and attribution._flagged(labels)["fwd_op"].sum() > 500


@pytest.mark.parametrize("path", [LM, BERT], ids=lambda p: p.stem)
def test_only_the_outermost_forward_ops_are_candidates_for_a_kernels_op(path):
    """The op labels packed while the names go are the outermost forward ops (those a call can
    end up with): fewer than the forward-op labels, and the ranges that are their own outermost
    forward op in the nesting's answer for every range."""
    from kview.analysis import attribution, nvtx_ranges

    t = open_trace(path, use_cache=False)
    labels = attribution.op_labels(t)
    codes = attribution._op_candidates(t, labels)
    forward = set(labels.filter("fwd_op")["name_code"].to_list())
    assert set(codes.tolist()) < forward and len(codes) > 100
    nest = nvtx_ranges.projection_nesting(t)
    names = nest.take(["name_code"])["name_code"].to_numpy()
    rows = nest.outermost(attribution._by_code(labels, "fwd_op", attribution._code_count(names, labels))[names])
    assert set(names[rows[rows >= 0]].tolist()) == set(codes.tolist())


@pytest.mark.parametrize("path", [LM, BERT], ids=lambda p: p.stem)
def test_the_kinds_around_each_call_are_the_nestings_answers_for_its_range(path):
    """_Kinds.placed, a walk up each call's chain of parents (some hundred calls at a time
    here), gives for a call whose innermost range is a row the nesting's answer for that row
    (Nesting.answers over every range), for every row, and -1 for a call in none."""
    from kview.analysis import attribution, nvtx_ranges

    t = open_trace(path, use_cache=False)
    labels = attribution.op_labels(t)
    kinds = attribution._Kinds(t, labels)
    kinds.CALLS = 300
    nest = nvtx_ranges.projection_nesting(t)
    inner = np.append(np.arange(len(nest.depth)), -1)
    got = kinds.placed(inner[::-1])
    asks = [((kinds.bits[:-1] & (1 << bit)) != 0, outer) for bit, (_, _, outer) in enumerate(kinds.KINDS)]
    for (key, _, _), rows in zip(kinds.KINDS, nest.answers(asks)):
        assert np.array_equal(got[key][::-1], np.append(rows, -1)), key
        assert (rows >= 0).sum() > (100 if key != "opt" else 0), key


@pytest.mark.parametrize("path", [LM, BERT], ids=lambda p: p.stem)
def test_the_node_an_eval_range_ran_found_by_its_row_is_the_one_joined_on_its_id(path):
    """_Kinds.eval_nodes (an eval range's first node child found by its tree row) gives what a
    join of the range's id to node_of_eval gives: for every evaluate_function range, every range
    of the first thousand and no range (-1)."""
    from kview.analysis import attribution, nvtx_ranges

    t = open_trace(path, use_cache=False)
    kinds = attribution._Kinds(t, attribution.op_labels(t))
    nest = nvtx_ranges.projection_nesting(t)
    evals = np.flatnonzero(kinds.bits[:-1] & (1 << kinds.BIT["eval"]))
    at = np.concatenate([evals, [-1], np.arange(min(1000, len(nest.depth)))])
    got = kinds.eval_nodes(at)
    ids = nest.take(["id"], attribution._rows_or_null(at)).rename({"id": "eval_id"})
    want = ids.join(kinds.node_of_eval, on="eval_id", how="left", maintain_order="left").select("eseq", "estart")
    assert got.equals(want)
    assert got["estart"].head(len(evals)).drop_nulls().len() > 50


def test_launch_dims_written_per_shape_are_each_ops_text():
    """Grid and Block, written once per distinct launch shape, are each op's own text (copies
    `-`), and a shape past the packing's bounds has its ops' text made one by one."""
    from kview.analysis.attribution import _launch_dims, gpu_ops

    ops = gpu_ops(open_trace(DLRM, use_cache=False))
    assert ops["kind"].n_unique() > 1 and ops.select(pl.col("grid_x").n_unique()).item() > 5
    f = pl.col

    def each(frame: pl.DataFrame, what: str) -> list[str]:
        return [
            "x".join(str(1 if r[f"{what}_{a}"] is None else r[f"{what}_{a}"]) for a in "xyz")
            if r["kind"] == "kernel" and (r[f"{what}_x"] or 0) > 0
            else "-"
            for r in frame.iter_rows(named=True)
        ]

    for what in ("grid", "block"):
        assert _launch_dims(ops, what).to_list() == each(ops, what)
    wide = ops.with_columns(
        pl.when(f("Idx") == f("Idx").filter(f("kind") == "kernel").first())
        .then(70000)
        .otherwise(f("grid_y"))
        .alias("grid_y")
    )
    got = _launch_dims(wide, "grid")
    assert got.to_list() == each(wide, "grid") and got.str.contains("x70000x").sum() == 1


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"])
def test_a_gpu_op_read_refused_after_the_names_is_said_as_in_turn(tmp_path, table):
    """`kview kernels` reads the GPU ops and their launches after the names go: a table the
    reader refuses (text in an integer column) is said as a trace that keeps its names says it
    (the GPU ops read first), and its ranges are read once."""
    from kview.errors import TraceError

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(LM.read_bytes())
    with sqlite3.connect(bad) as con:
        con.execute(f"UPDATE {table} SET start = 'x' WHERE rowid = 5")
    said = []
    for alone in (True, False):  # the command's way, and a trace that keeps its names
        t = open_trace(bad, use_cache=False)
        t.ranges_only_for_attribution = t.only_attribution = alone
        read = t.source.nvtx_events
        reads = []
        t.source.nvtx_events = lambda read=read, reads=reads: reads.append(1) or read()  # type: ignore[method-assign]
        with pytest.raises(TraceError) as e:
            attribute(t)
        said.append(str(e.value))
        assert len(reads) == alone
    assert said[0] == said[1] and "Invalid column type Text" in said[0] and "start" in said[0]


@pytest.mark.parametrize("report", ["nvtx_kern_sum", "nvtx_gpu_proj_sum"])
@pytest.mark.parametrize("nvtx_too", [False, True], ids=["ops", "ops-and-ranges"])
def test_an_nvtx_reports_gpu_op_read_refused_is_said_first(tmp_path, report, nvtx_too):
    """The NVTX projection reports read the GPU ops and their launches before the ranges: a
    kernel table the reader refuses is said first, damaged ranges too or not; damaged ranges
    alone are said as theirs."""
    from kview.errors import TraceError
    from kview.reports import REPORTS

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(LM.read_bytes())
    with sqlite3.connect(bad) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid = 5")
        if nvtx_too:
            con.execute("UPDATE NVTX_EVENTS SET start = 'x' WHERE rowid = 3")
    with pytest.raises(TraceError, match=r"cannot be read \(Invalid column type Text at index: 0, name: start\)"):
        REPORTS[report](open_trace(bad, use_cache=False))
    if nvtx_too:  # the ranges alone
        with sqlite3.connect(bad) as con:
            con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1 WHERE rowid = 5")
        with pytest.raises(TraceError, match=r"cannot be read \(Invalid column type Text at index: 1, name: start\)"):
            REPORTS[report](open_trace(bad, use_cache=False))


@pytest.mark.parametrize(
    "path", [*sorted(SAMPLES.glob("*_nsys.sqlite")), *sorted(SAMPLES.glob("*_torch.sqlite"))], ids=lambda p: p.name
)
def test_seq_read_where_its_text_is_found_equals_the_regex_over_every_label(path):
    """The op labels' autograd seq, read by the regex only where a literal search finds
    `, seq = `, is the regex's answer over every label; the same for labels built to trip it
    (a `, seq = ` without digits before one with them, a null label, several seqs)."""
    from kview.analysis import attribution as at
    from kview.analysis import nvtx_ranges as nv

    labels = nv.labels(open_trace(path, use_cache=False))["label"]
    want = labels.str.extract(r", seq = (\d+)", 1).cast(pl.Int64)
    got = at._seqs(labels)
    assert got.eq_missing(want).all() and got.name == "seq"
    if "forward" not in path.name:  # a training step's autograd ops: seqs are there to read
        assert got.drop_nulls().len() > 0
    made = pl.Series(
        "label", ["aten::mm, seq = x, seq = 12", None, "a, seq = 7, seq = 9", "plain", "b, seq = ", ", seq = 3"]
    )
    assert at._seqs(made).to_list() == [12, None, 7, None, None, 3]
    assert at._seqs(made.clear()).len() == 0
