"""Efficiency: the GPU a trace ran on, its peaks, MFU / bandwidth / roofline per kernel, layer and
step, and FP32 GEMMs that could use tensor cores. Every figure is recomputed here from the
trace's rows (kview's per-kernel FLOPs and bytes, the trace's own tables by SQL) and the peak
table, with plain Python."""

from __future__ import annotations

import json
import lzma
import re
import shutil
import sqlite3

import polars as pl
import pytest

from kview.analysis import efficiency as eff
from kview.analysis.gpu_peaks import PEAKS, device_gpus, named_gpu
from kview.trace import open_trace

from conftest import FIXTURES, KINETO, PUBLIC, SAMPLES
from in_process import kview_here as kview  # the document and the exit status: no child needed

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
H200_FP32, H200_BW = 67e12, 4800e9  # the H200 SXM row (NVIDIA H200 datasheet)


@pytest.fixture(scope="module")
def ddp1(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "ddp_nsys.rank1.sqlite"
    with lzma.open(FIXTURES / "capture" / "ddp_nsys.rank1.sqlite.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


@pytest.fixture(scope="module")
def lm_rows():
    """`kview kernels` of the LM sample as plain dicts: kview's FLOPs and bytes per kernel."""
    p = kview("kernels", LM, "-f", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_peak_table_covers_the_common_gpus_with_a_source():
    names = PEAKS["GPU"].to_list()
    for want in ("A100", "H100 SXM", "H100 PCIe", "H200", "B200", "L4", "MI250", "MI300X"):
        assert any(want in n for n in names), want
    assert PEAKS["Source"].null_count() == 0 and PEAKS["FP32 (TFLOP/s)"].null_count() == 0
    assert PEAKS["Memory (GB/s)"].null_count() == 0
    # dense tensor figures: BF16 twice TF32 wherever both exist on NVIDIA, FP8 twice BF16 (within
    # the datasheets' rounding)
    nv = PEAKS.filter(pl.col("TF32 (TFLOP/s)").is_not_null() & pl.col("FP32 matrix (TFLOP/s)").is_null())
    assert nv["BF16 (TFLOP/s)"].to_list() == pytest.approx((2 * nv["TF32 (TFLOP/s)"]).to_list(), rel=0.01)
    fp8 = PEAKS.filter(pl.col("FP8 (TFLOP/s)").is_not_null())
    assert fp8["FP8 (TFLOP/s)"].to_list() == pytest.approx((2 * fp8["BF16 (TFLOP/s)"]).to_list(), rel=0.01)


@pytest.mark.parametrize(
    "path, gpu, how",
    [
        (LM, "H200 SXM", "name"),  # nsys TARGET_INFO_GPU "NVIDIA H200"
        (PUBLIC / "dlprof_lenet_nsys2022.1.sqlite", "GeForce RTX 2070 SUPER", "name"),
        (PUBLIC / "vecadd_nsys2025.5.sqlite", "GeForce RTX 3060", "name"),
        (KINETO / "traces__b200__eager_trace.json.gz", "B200", "name"),  # Kineto deviceProperties
        (KINETO / "negative_queue_length_values_check__rank0.json.gz", "A100 SXM4 80GB", "name"),
        (KINETO / "resnet50_nw0_2021.pt.trace.json.gz", "V100 SXM2", "name"),
        (KINETO / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "MI250 (one die) / MI210", "compute units"),
        (KINETO / "traces__inference__vllm_decode_full__graph_execution.json.gz", "MI300X", "compute units"),
        # the kernels' device is not among deviceProperties (one MI300X): it takes the described one
        (KINETO / "traces__torch_compile_triton__trace.json.gz", "MI300X", "the trace's other devices"),
    ],
)
def test_the_gpu_comes_from_the_trace(path, gpu, how):
    g = eff.trace_gpus(open_trace(path, use_cache=False))
    assert g.height >= 1 and set(g["GPU"]) == {gpu}
    assert g["How"].str.starts_with(how).all()


def test_unknown_gpu_and_the_gpu_flag():
    t = open_trace(PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite", use_cache=False)
    assert eff.trace_gpus(t)["GPU"].null_count() == 2  # no TARGET_INFO_GPU in this export
    assert set(eff.trace_gpus(t, named_gpu("h100-sxm"))["GPU"]) == {"H100 SXM"}
    p = kview("efficiency", PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite", "--table", "gpus")
    assert p.returncode == 0 and "no peaks known for its GPU" in p.stderr
    p = kview("efficiency", LM, "--gpu", "no-such-gpu")
    assert p.returncode == 2 and p.stderr.startswith("kview: --gpu: no peaks known") and p.stderr.count("\n") == 1
    assert device_gpus(pl.DataFrame({"id": [0], "name": ["NVIDIA H100 PCIe"]}))["GPU"][0] == "H100 PCIe"


def _operand_bytes(params: str) -> int:
    """FP32 bytes of a GEMM's two operands and its result, from `kview kernels`' Params."""
    nums = [[int(x) for x in g.split(",") if x] for g in re.findall(r"=\(?([\d,]+)\)?", params)]
    if params.startswith("M="):  # linear / mm: M, N (maybe a shape), K
        m, n, k = nums[0][0], 1, nums[2][0]
        for d in nums[1]:
            n *= d
        return 4 * (m * k + k * n + m * n)
    assert params.startswith("A="), params  # matmul: the two shapes
    a, b = nums
    size = 1
    for d in a:
        size *= d
    other = 1
    for d in b:
        other *= d
    return 4 * (size + other + size // a[-1] * b[-1])


def _kept(rows, peak, bw):
    """kview's estimates an op could reach in its time; an op whose FLOPs or bytes could not
    loses both (as documented). GEMMs carry their operands' bytes."""
    out = []
    for r in rows:
        d, f, b = r["Duration (ns)"], r["FLOPs"], r["Bytes"]
        if r["Category"] == "gemm" and f is not None and b is None:
            b = _operand_bytes(r["Params"])
        host = re.match(r"^\[CUDA memcpy (Host|Device-to-Host)", r["Kernel"])
        b = None if host else b
        fits = (f is None or f * 1e9 <= peak * d) and (b is None or b * 1e9 <= bw * d)
        out.append({**r, "f": f if fits else None, "b": b if fits else None})
    return out


def test_layer_mfu_and_bandwidth_equal_plain_sums(lm_rows):
    """LM small on an H200, FP32 throughout: MFU of a layer = Σ FLOPs / (Σ GPU time x 67 TFLOP/s)."""
    counted = [r for r in lm_rows if r["FLOPs"] is not None]
    # every kernel with FLOPs runs against the FP32 peak: FP32 GEMMs, float or integer elementwise
    assert counted and not any(re.search(r"bf16|bfloat16|f16|half|tf32|e4m3", r["Kernel"]) for r in counted)
    assert all(re.search(r"ffma|sgemm|float", r["Kernel"]) for r in counted if r["Category"] == "gemm")
    rows = _kept(lm_rows, H200_FP32, H200_BW)
    got = eff.by_group(open_trace(LM, use_cache=False), "Layer")
    assert got["Layer"].str.starts_with("layer_").sum() == 12
    for layer in ("layer_0", "layer_7", "lm_head", "final_norm"):
        mine = [r for r in rows if (r["Layer"] or "-").split(":")[0] == layer]
        time = sum(r["Duration (ns)"] for r in mine)
        flops = sum(r["f"] for r in mine if r["f"] is not None)
        byts = [r["b"] for r in mine if r["b"] is not None]
        row = got.filter(pl.col("Layer") == layer).row(0, named=True)
        assert row["GPU Time (ns)"] == time and row["FLOPs"] == flops
        assert row["MFU (%)"] == round(flops / (time * 1e-9 * H200_FP32) * 100, 2) > 0
        if byts:
            assert row["Bandwidth (%)"] == round(sum(byts) / (time * 1e-9 * H200_BW) * 100, 2)


def test_step_mfu_over_the_step_range_equals_sql(lm_rows):
    """The profiled step's MFU: FLOPs of the kernels launched inside it at 67 TFLOP/s, over the
    step range's wall time; the step, the launches and the durations from the SQLite tables."""
    con = sqlite3.connect(f"file:{LM}?mode=ro", uri=True)
    ((s, e),) = con.execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) "
        "= 'profiled_step'"
    ).fetchall()
    launch = dict(con.execute("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall())
    rows = _kept(lm_rows, H200_FP32, H200_BW)
    inside = [r for r in rows if s <= launch.get(r["Correlation"], 0) <= e]
    flops = sum(r["f"] for r in inside if r["f"] is not None)
    got = eff.by_step(open_trace(LM, use_cache=False)).row(0, named=True)
    assert got["Step"] == "profiled_step" and got["Wall (ns)"] == e - s and got["GPUs"] == 1
    assert got["GPU Time (ns)"] == sum(r["Duration (ns)"] for r in inside)
    assert got["MFU (%)"] == round(flops / ((e - s) * 1e-9 * H200_FP32) * 100, 2)


def test_kernel_rows_and_roofline(lm_rows):
    got = eff.by_kernel(open_trace(LM, use_cache=False))
    rows = _kept(lm_rows, H200_FP32, H200_BW)
    top = got.row(0, named=True)  # the longest kernel: an FP32 GEMM against the FP32 peak
    mine = [r for r in rows if r["Kernel"] == top["Kernel"]]
    flops = sum(r["f"] for r in mine if r["f"] is not None)
    time = sum(r["Duration (ns)"] for r in mine)
    assert top["Category"] == "gemm" and top["Precision"] == "fp32" and top["Peak (TFLOP/s)"] == 67.0
    assert (top["Calls"], top["GPU Time (ns)"]) == (len(mine), time)
    assert top["TFLOP/s"] == round(flops / time / 1e3, 3) and top["MFU (%)"] == round(flops / (time * 67e3) * 100, 2)
    # a GEMM with shapes: its operands' bytes place it on the roofline, above the ridge point
    byts = sum(r["b"] for r in mine if r["b"] is not None)
    assert top["Bytes"] == byts and top["AI (FLOP/B)"] == round(flops / byts, 3) and top["Bound"] == "compute"
    assert top["Roofline (%)"] == round(top["TFLOP/s"] * 100 / 67.0, 2)
    # an elementwise kernel: both FLOPs and bytes, so a place on the roofline
    ew = got.filter(pl.col("Bound").is_not_null() & (pl.col("Category") == "elementwise")).row(0, named=True)
    mine = [r for r in rows if r["Kernel"] == ew["Kernel"]]
    f = sum(r["f"] for r in mine if r["f"] is not None)
    b = sum(r["b"] for r in mine if r["b"] is not None)
    t = sum(r["Duration (ns)"] for r in mine)
    ai = f / b
    attainable = min(67.0, ai * 4800e9 / 1e12)
    assert ew["AI (FLOP/B)"] == round(ai, 3) and ew["Bound"] == ("memory" if ai < 67e12 / 4800e9 else "compute")
    assert ew["Roofline (%)"] == round(round(f / t / 1e3, 3) * 100 / attainable, 2)


def test_fp32_gemms_that_could_use_tensor_cores(ddp1):
    """DDP capture on an H200 (TF32 tensor cores) ran its GEMMs in FP32 on the CUDA cores: the
    candidates are the trace's sgemm/ffma kernels, counted here by SQL."""
    con = sqlite3.connect(f"file:{ddp1}?mode=ro", uri=True)
    n, t = con.execute(
        "SELECT COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName WHERE (s.value LIKE '%sgemm%' OR s.value LIKE '%ffma%')"
    ).fetchone()
    trace = open_trace(ddp1, use_cache=False)
    c = eff.tensor_core_candidates(trace)
    assert (int(c["Calls"].sum()), int(c["GPU Time (ns)"].sum())) == (n, t)
    assert set(c["Shapes allow TF32"]) == {"unknown (no shapes)"}  # captured without shapes
    f = eff.finding(trace)
    assert f is not None and f"{n:,} GEMMs" in f and "Efficiency view (key 9)" in f
    from kview.analysis.overview import build

    assert f in build(trace).findings
    # with shapes (the LM sample) they are checked: every GEMM there is M, N, K multiples of 4
    lm = eff.tensor_core_candidates(open_trace(LM, use_cache=False))
    assert set(lm["Shapes allow TF32"]) == {"yes"}
    # TF32 kernels already on tensor cores (ResNet-50 convolutions) and GPUs without TF32 (V100) are no candidates
    assert eff.finding(open_trace(KINETO / "resnet50_nw0_2021.pt.trace.json.gz", use_cache=False)) is None


def test_precision_from_kernel_names():
    names = pl.Series(
        [
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4",
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize256x128x32",
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(...)",
            "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
            "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn",
            "bmm_E4m3_E4m3E4m3_Fp32_t128x16x256",
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN",
            "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN",
            "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN",
        ]
    )
    got = dict(eff.precision_of(names).iter_rows())
    assert [got[n] for n in names] == ["fp32", "tf32", "tf32", "bf16", "fp16", "fp8", "bf16", "fp32", None]


def test_every_format_and_the_peaks_table(tmp_path):
    for fmt in ("table", "md", "csv", "tsv", "json"):
        p = kview("efficiency", LM, "--table", "layers", "-f", fmt)
        assert p.returncode == 0 and "lm_head" in p.stdout.replace("\\_", "_"), (fmt, p.stderr)
    p = kview("efficiency", LM, "-f", "json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and len(doc) == 6 and doc["Efficiency by step"][0]["Step"] == "profiled_step"
    p = kview("efficiency", LM, "-f", "csv")
    assert p.returncode == 2 and "--table" in p.stderr
    p = kview("efficiency", LM, "--table", "peaks", "-f", "csv")
    assert p.returncode == 0 and pl.read_csv(p.stdout.encode()).height == PEAKS.height
    p = kview("efficiency", KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "-f", "json")
    assert p.returncode == 0  # a trace without kernels opens


def test_gemm_operand_bytes():
    assert eff.gemm_bytes("M=768,N=(4,256),K=3072", "fp32") == 4 * (768 * 3072 + 3072 * 1024 + 768 * 1024)
    assert eff.gemm_bytes("B=2,M=3,N=4,K=5", "bf16") == 2 * 2 * (3 * 5 + 5 * 4 + 3 * 4)
    assert eff.gemm_bytes("A=(4,12,256,64),B=(64,256)", "16-bit?") == 2 * (
        4 * 12 * 256 * 64 + 64 * 256 + 48 * 256 * 256
    )
    assert eff.gemm_bytes("[4,256];[768]", "fp32") is None and eff.gemm_bytes(None, "fp32") is None
