"""Achieved against peak: MFU, bandwidth utilisation and roofline position per kernel, layer,
category and step, and the FP32 GEMMs that could run on tensor cores.

Built on the attributed table's FLOPs and Bytes (what kview models: GEMMs from their op's
shapes, elementwise ops from their element count; bytes of device-side copies and elementwise
ops; for a GEMM with shapes, the bytes of its operands and result, each once: the least it
moves) and on the peaks of the GPU the trace ran on (gpu_peaks). Each kernel is measured against
the peak of its own precision, read from its name (`bf16`, `f16`, `tf32`, `e4m3`, `sgemm`/`ffma`,
AMD Tensile's data-type field); a tensor-core kernel whose name does not say (cuBLASLt `nvjet_*`)
is taken as 16-bit, any other as FP32, and the Precision column marks that with `?`. An op's
FLOPs or bytes that would exceed the peak or the bandwidth in the op's time (kview's estimate
does not fit that kernel: a backward helper kernel carries its forward op's shapes) are left out.

One definition for every group: MFU (%) = the time the group's FLOPs need at peak, Σ FLOPs_k /
peak_k, over the group's time; bandwidth (%) = Σ bytes / (time x memory bandwidth). The time of
a kernel, layer or category is its GPU time (the sum of its ops' durations); of a step, its wall
time times the GPUs that worked in it. FLOP coverage says how much of that GPU time lies in
kernels with a FLOP count: MFU leaves the rest's FLOPs out. Roofline: arithmetic intensity AI =
FLOPs / bytes (where both are known), the ridge point peak / bandwidth, Bound = memory below it
and compute above, and Roofline (%) = achieved / min(peak, AI x bandwidth).
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from kview.analysis.attribution import attribute, gpu_ops
from kview.analysis.categories import name_categories
from kview.analysis.compare import ops_by_launch
from kview.analysis.gpu_peaks import PEAKS, device_gpus
from kview.analysis.steps import step_instances
from kview.derived import derived
from kview.notation import fmt_ns
from kview.trace import Trace

# first match wins, on the lower-cased kernel name
_PRECISION_RULES = [
    ("fp8", r"e4m3|e5m2|fp8|_f8_|f8f6f4"),
    ("bf16", r"bf16|bfloat16"),
    ("fp16", r"f16|fp16|half|h1688|h884|h16816|hgemm|hmma"),
    ("tf32", r"tf32|xf32|tensorop_s\d+gemm"),
    ("fp32", r"sgemm|ffma|f32f32|scudnn|simt|\bfloat\b"),
]
# AMD Tensile / hipBLASLt kernels: `Cijk_Ailk_Bljk_BBS_...`: the field after the layouts, by its
# first letters (S single, H half, B bfloat16, F8 fp8, X xfloat32)
_TENSILE = r"^cijk_[a-z]+_[a-z]+_([a-z0-9]+)_"
_TENSILE_TYPES = [("fp8", "f8"), ("tf32", "x"), ("bf16", "b"), ("fp16", "h"), ("fp32", "s")]
_PEAK_COLUMN = {
    "fp32": "FP32 (TFLOP/s)",
    "tf32": "TF32 (TFLOP/s)",
    "bf16": "BF16 (TFLOP/s)",
    "fp16": "FP16 (TFLOP/s)",
    "fp8": "FP8 (TFLOP/s)",
}


def precision_of(names: pl.Series) -> pl.DataFrame:
    """Kernel -> precision (fp8, bf16, fp16, tf32, fp32, or null when the name does not say),
    once per distinct name."""
    uniq = names.drop_nulls().unique()
    low = pl.col("Kernel").str.to_lowercase()
    tensile = low.str.extract(_TENSILE, 1)
    expr: Any = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.String))  # Then, then ChainedThen
    for p, start in _TENSILE_TYPES:
        expr = expr.when(tensile.str.starts_with(start)).then(pl.lit(p))
    for p, rx in _PRECISION_RULES:
        expr = expr.when(low.str.contains(rx)).then(pl.lit(p))
    return pl.DataFrame({"Kernel": uniq}).select(
        "Kernel", expr.otherwise(pl.lit(None, dtype=pl.String)).alias("precision")
    )


_ELEMENT = {"fp8": 1, "bf16": 2, "fp16": 2, "16-bit?": 2}  # bytes per element; FP32 and TF32: 4


def _prod(text: str) -> int:
    out = 1
    for v in text.strip("()").split(","):
        out *= int(v)
    return out


def gemm_bytes(params: str | None, precision: str | None) -> int | None:
    """The bytes of a GEMM's operands and result, each once, from attribution's Params
    (`M=768,N=(4,256),K=768` of linear, `M=,N=,K=` of mm, `B=,M=,N=,K=` of bmm, `A=(..),B=(..)`
    of matmul); None for any other text."""
    size = _ELEMENT.get(precision or "", 4)
    if params is None:
        return None
    m = re.fullmatch(r"M=(\d+),N=(\(?[\d,]+\)?),K=(\d+)", params)
    if m:  # linear: X (N x K), W (M x K), Y (N x M); mm: A (M x K), B (K x N), C (M x N): the same sum
        mm, n, k = int(m[1]), _prod(m[2]), int(m[3])
        return (mm * k + k * n + mm * n) * size
    m = re.fullmatch(r"B=(\d+),M=(\d+),N=(\d+),K=(\d+)", params)
    if m:
        b, mm, n, k = (int(x) for x in m.groups())
        return b * (mm * k + k * n + mm * n) * size
    m = re.fullmatch(r"A=(\([\d,]+\)|\d+),B=(\([\d,]+\)|\d+)", params)
    if m:
        a_dims = [int(v) for v in m[1].strip("()").split(",")]
        b_dims = [int(v) for v in m[2].strip("()").split(",")]
        if len(a_dims) < 2 or len(b_dims) < 2:
            return None
        batch = _prod(",".join(map(str, a_dims[:-2]))) if len(a_dims) > 2 else 1
        return (_prod(m[1]) + _prod(m[2]) + batch * a_dims[-2] * b_dims[-1]) * size
    return None


def peak_lookup(gpus: pl.DataFrame) -> pl.DataFrame:
    """Device -> GPU and each precision's peak (FLOP/s) and bandwidth (B/s)."""
    p = PEAKS.select(
        "GPU",
        *[(pl.col(c) * 1e12).alias(f"peak_{k}") for k, c in _PEAK_COLUMN.items()],
        (pl.col("FP32 matrix (TFLOP/s)") * 1e12).alias("peak_fp32_matrix"),
        (pl.col("Memory (GB/s)") * 1e9).alias("bandwidth"),
    )
    return gpus.select("Device", "GPU").join(p, on="GPU", how="left")


@derived
def trace_gpus(trace: Trace, override: str | None = None) -> pl.DataFrame:
    """Device, Name, GPU, How for every device with GPU work (a device the trace does not
    describe takes the GPU of the described ones when they are all one GPU)."""
    known = device_gpus(trace.devices, override)

    ops = gpu_ops(trace)  # not the attribution: the Overview asks too
    used = (ops["device"] if "device" in ops.columns else pl.Series([], dtype=pl.Int64)).drop_nulls().unique().sort()
    missing = used.filter(~used.is_in(known["Device"].implode()))
    if missing.len():
        gpus = known["GPU"].drop_nulls().unique()
        fill = override or (gpus[0] if gpus.len() == 1 and known["GPU"].null_count() == 0 else None)
        how = "--gpu" if override else ("the trace's other devices" if fill else "unknown")
        known = pl.concat(
            [known, pl.DataFrame({"Device": missing, "Name": None, "GPU": fill, "How": how}, schema=known.schema)]
        )
    return known.filter(pl.col("Device").is_in(used.implode()) | pl.lit(used.len() == 0)).sort("Device")


@derived
def kernel_efficiency(trace: Trace, override: str | None = None) -> pl.DataFrame:
    """Per GPU op: Idx, Kernel, Category, Layer, Device, dur, FLOPs, Bytes (device-side only),
    precision (`?` when assumed), TC, peak (FLOP/s), bandwidth (B/s) and ideal (ns at peak)."""
    a = attribute(trace).select(
        "Idx", "Kernel", "Category", "Device", "Duration (ns)", "FLOPs", "Bytes", "TC", "Params"
    )
    prec = precision_of(a["Kernel"])
    tc = pl.col("TC").fill_null(False)
    # a GEMM or attention kernel whose name does not say is assumed (marked `?`); other kernels
    # without a precision are measured against FP32 (elementwise work, copies)
    matmul = pl.col("Category").is_in(["gemm", "attention"])
    a = a.join(prec, on="Kernel", how="left").with_columns(
        pl.when(pl.col("precision").is_not_null())
        .then(pl.col("precision"))
        .when(matmul & tc)
        .then(pl.lit("16-bit?"))
        .when(matmul)
        .then(pl.lit("fp32?"))
        .alias("Precision"),
        tc.alias("tc"),
    )
    # a GEMM with shapes moves at least its three matrices once (the bytes its roofline needs)
    gemm = (pl.col("Category") == "gemm") & pl.col("FLOPs").is_not_null() & pl.col("Bytes").is_null()
    keys = a.filter(gemm).select("Params", "Precision").unique()
    sizes = [gemm_bytes(p, q) for p, q in keys.iter_rows()]
    keys = keys.with_columns(pl.Series("_gemm_bytes", sizes, dtype=pl.Int64)).rename({"Params": "_params"})
    # joined on the GEMMs' Params only: with shapes, Params holds ~1 kB per op (1.4 GB on the
    # dense 1.1M-kernel trace, views of a few texts) and hashing all of it took 2.7 GB
    a = (
        a.with_columns(pl.when(gemm).then(pl.col("Params")).alias("_params"))
        .join(keys, on=["_params", "Precision"], how="left", nulls_equal=True)
        .with_columns(pl.when(gemm).then(pl.col("_gemm_bytes")).otherwise(pl.col("Bytes")).alias("Bytes"))
        .drop("_gemm_bytes", "_params", "Params")
    )
    peaks = peak_lookup(trace_gpus(trace, override))
    a = a.join(peaks, on="Device", how="left")
    p = pl.col("Precision")
    peak = (
        pl.when(p == "fp8")
        .then(pl.col("peak_fp8"))
        .when(p == "bf16")
        .then(pl.coalesce("peak_bf16", "peak_fp16"))
        .when(p.is_in(["fp16", "16-bit?"]))
        .then(pl.coalesce("peak_fp16", "peak_bf16"))
        .when(p == "tf32")
        .then(pl.col("peak_tf32"))
        .when(pl.col("tc"))  # FP32 on matrix cores: AMD's FP32 matrix rate (NVIDIA's would be TF32)
        .then(pl.coalesce("peak_fp32_matrix", "peak_tf32"))
        .otherwise(pl.col("peak_fp32"))
    )
    # bandwidth of the GPU's memory: a host copy is bound by its link instead, so it carries none
    device_side = ~pl.col("Kernel").str.contains(r"^\[CUDA memcpy (Host|Device-to-Host|Pageable|Pinned)")

    layer = ops_by_launch(trace, "layer").select("Idx", "Layer", "t")
    return (
        a.with_columns(peak.alias("peak"), pl.when(device_side).then(pl.col("Bytes")).alias("Bytes"))
        # an estimate the op could not have reached in its time (a backward helper kernel given
        # its forward op's shapes, a split-K reduction given its GEMM's) is left out, FLOPs and
        # bytes together, rather than shown as more than the peak
        .with_columns(
            (
                (pl.col("peak").is_null() | (pl.col("FLOPs") * 1e9 <= pl.col("peak") * pl.col("Duration (ns)")))
                .fill_null(True)
                .and_(
                    (
                        pl.col("bandwidth").is_null()
                        | (pl.col("Bytes") * 1e9 <= pl.col("bandwidth") * pl.col("Duration (ns)"))
                    ).fill_null(True)
                )
            ).alias("_fits")
        )
        .with_columns(
            pl.when("_fits").then(pl.col("FLOPs")).alias("FLOPs"),
            pl.when("_fits").then(pl.col("Bytes")).alias("Bytes"),
        )
        .with_columns((pl.col("FLOPs").cast(pl.Float64) / pl.col("peak") * 1e9).alias("ideal"))
        .join(layer, on="Idx", how="left")
        .select(
            "Idx",
            "Kernel",
            "Category",
            "Layer",
            "Device",
            "GPU",
            "t",
            pl.col("Duration (ns)").alias("dur"),
            "FLOPs",
            "Bytes",
            "Precision",
            "TC",
            "peak",
            "bandwidth",
            "ideal",
        )
    )


def _measures(time: pl.Expr) -> list[pl.Expr]:
    """The achieved-versus-peak columns of a group whose time (ns) is `time`."""
    flops = pl.col("FLOPs").sum()
    counted = pl.col("dur").filter(pl.col("FLOPs").is_not_null()).sum()
    has_flops = pl.col("FLOPs").is_not_null().any()
    has_bytes = pl.col("Bytes").is_not_null().any()
    return [
        pl.when(has_flops).then(flops).alias("FLOPs"),
        pl.when(has_bytes).then(pl.col("Bytes").sum()).alias("Bytes"),
        pl.when(has_flops & (time > 0)).then((flops.cast(pl.Float64) / time / 1e3).round(3)).alias("TFLOP/s"),
        pl.when(has_flops & (time > 0) & pl.col("ideal").is_not_null().any())
        .then((pl.col("ideal").sum() * 100.0 / time).round(2))
        .alias("MFU (%)"),
        pl.when(has_bytes & (time > 0) & pl.col("bandwidth").is_not_null().any())
        .then((pl.col("Bytes").sum().cast(pl.Float64) / (time * pl.col("bandwidth").max() / 1e9) * 100.0).round(2))
        .alias("Bandwidth (%)"),
        pl.when(pl.col("dur").sum() > 0)
        .then((counted * 100.0 / pl.col("dur").sum()).round(1))
        .alias("FLOP coverage (%)"),
    ]


def by_kernel(trace: Trace, override: str | None = None) -> pl.DataFrame:
    """One row per kernel name: its precision, peak, achieved TFLOP/s, MFU, bandwidth and its
    place on the roofline."""
    k = kernel_efficiency(trace, override)
    g = k.group_by("Kernel").agg(
        pl.col("Category").first(),
        pl.col("Precision").first(),
        pl.col("TC").first(),
        pl.len().alias("Calls"),
        pl.col("dur").sum().alias("GPU Time (ns)"),
        *_measures(pl.col("dur").sum().cast(pl.Float64)),
        (pl.col("peak").max() / 1e12).alias("Peak (TFLOP/s)"),
        pl.col("bandwidth").max().alias("_bw"),
    )
    ai = pl.col("FLOPs").cast(pl.Float64) / pl.col("Bytes").cast(pl.Float64)
    ridge = pl.col("Peak (TFLOP/s)") * 1e12 / pl.col("_bw")
    attainable = pl.min_horizontal(pl.col("Peak (TFLOP/s)"), ai * pl.col("_bw") / 1e12)
    known = (pl.col("Bytes") > 0) & pl.col("FLOPs").is_not_null() & pl.col("_bw").is_not_null()
    return (
        g.with_columns(
            pl.when(known).then(ai.round(3)).alias("AI (FLOP/B)"),
            pl.when(known).then(pl.when(ai < ridge).then(pl.lit("memory")).otherwise(pl.lit("compute"))).alias("Bound"),
            pl.when(known & (attainable > 0))
            .then((pl.col("TFLOP/s") * 100.0 / attainable).round(2))
            .alias("Roofline (%)"),
        )
        .drop("_bw", "FLOP coverage (%)")
        .sort(["GPU Time (ns)", "Kernel"], descending=[True, False])
    )


def by_group(trace: Trace, key: str, override: str | None = None) -> pl.DataFrame:
    """One row per layer (compare's layer) or category: GPU time, FLOPs, MFU, bandwidth."""
    k = kernel_efficiency(trace, override)
    return (
        k.group_by(key)
        .agg(
            pl.len().alias("Kernels"),
            pl.col("dur").sum().alias("GPU Time (ns)"),
            *_measures(pl.col("dur").sum().cast(pl.Float64)),
        )
        .sort(["GPU Time (ns)", key], descending=[True, False])
    )


def by_step(trace: Trace, override: str | None = None) -> pl.DataFrame:
    """One row per step (iterations.step_instances; the whole trace's GPU span without steps):
    wall time, GPU time, MFU over the wall time of the GPUs that worked in it."""

    k = kernel_efficiency(trace, override).sort("t")
    steps = (
        step_instances(trace)
        .group_by("number")
        .agg(pl.col("label").first().alias("Step"), pl.col("start").min(), pl.col("end").max())
        .sort("start")
    )
    if steps.height:
        k = k.join_asof(steps, left_on="t", right_on="start", strategy="backward").filter(pl.col("t") <= pl.col("end"))
    else:
        k = k.with_columns(pl.lit("(whole trace)").alias("Step"), pl.lit(0).alias("number"))
        ops = attribute(trace)
        span = (ops["Start (ns)"] + ops["Duration (ns)"]).max() - ops["Start (ns)"].min() if ops.height else 0
        k = k.with_columns(pl.lit(0, dtype=pl.Int64).alias("start"), pl.lit(span, dtype=pl.Int64).alias("end"))
    wall = (pl.col("end").first() - pl.col("start").first()).cast(pl.Float64)
    time = wall * pl.col("Device").n_unique()
    return (
        k.group_by("number")
        .agg(
            pl.col("Step").first(),
            (pl.col("end").first() - pl.col("start").first()).alias("Wall (ns)"),
            pl.col("Device").n_unique().alias("GPUs"),
            pl.col("dur").sum().alias("GPU Time (ns)"),
            *_measures(time),
        )
        .sort("number")
        .drop("number")
    )


def tensor_core_candidates(trace: Trace, override: str | None = None) -> pl.DataFrame:
    """FP32 GEMMs that ran on the CUDA cores of a GPU with TF32 tensor cores: Kernel, Calls, GPU
    time, and whether their shapes allow it (M, N, K multiples of 4, the 16-byte alignment TF32
    tensor-core kernels need; unknown without shapes)."""
    k = kernel_efficiency(trace, override)
    gpus = PEAKS.filter(pl.col("TF32 (TFLOP/s)").is_not_null())["GPU"]
    fp32 = k.filter(
        (pl.col("Category") == "gemm")
        & ~pl.col("Kernel").str.to_lowercase().str.contains("reduce")  # split-K's reduction: the GEMM's helper
        & (pl.col("Precision") == "fp32")
        & ~pl.col("TC").fill_null(True)
        & pl.col("GPU").is_in(gpus.implode())
    )
    params = attribute(trace).select("Idx", "Params")
    dims = pl.col("Params").str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64))
    shaped = pl.col("Params").str.contains(r"^[MBA]=")
    fits = dims.list.eval((pl.element() % 4) == 0).list.all()
    return (
        fp32.join(params, on="Idx", how="left")
        .with_columns(pl.when(shaped).then(fits).alias("aligned"))
        .group_by("Kernel")
        .agg(
            pl.len().alias("Calls"),
            pl.col("dur").sum().alias("GPU Time (ns)"),
            pl.col("GPU").first(),
            pl.when(pl.col("aligned").is_null().all())
            .then(pl.lit("unknown (no shapes)"))
            .when(pl.col("aligned").fill_null(True).all())
            .then(pl.lit("yes"))
            .otherwise(pl.lit("some calls"))
            .alias("Shapes allow TF32"),
        )
        .sort(["GPU Time (ns)", "Kernel"], descending=[True, False])
    )


def finding(trace: Trace) -> str | None:
    """The Overview's sentence on FP32 GEMMs that ran on CUDA cores of a GPU with TF32 tensor
    cores (None: there are none). From the kernel names alone, so the Overview never waits for
    the attribution: the same kernels `tensor_core_candidates` lists."""

    ops = gpu_ops(trace)
    if ops.height == 0 or "Kernel" not in ops.columns:
        return None
    # grouped on the names as categories: a (text, device) key per op made a copy of every name
    # (a million ops, a few dozen names: 3x the time, 4x the memory)
    per = (
        ops.group_by(pl.col("Kernel").cast(pl.Categorical), "device")
        .agg(pl.len().alias("n"), (pl.col("end") - pl.col("start")).sum().alias("d"))
        .with_columns(pl.col("Kernel").cast(pl.String))
    )
    names = per["Kernel"].unique()
    per = per.join(name_categories(names), on="Kernel", how="left").join(precision_of(names), on="Kernel", how="left")
    gpus = peak_lookup(trace_gpus(trace)).filter(pl.col("peak_tf32").is_not_null()).select("Device", "GPU")
    hit = per.filter(
        (pl.col("name_category") == "gemm")
        & (pl.col("precision") == "fp32")
        & ~pl.col("tc").fill_null(False)
        & ~pl.col("Kernel").str.to_lowercase().str.contains("reduce")
    ).join(gpus, left_on="device", right_on="Device", how="inner")
    if hit.height == 0:
        return None
    total = int((ops["end"] - ops["start"]).sum() or 0)
    t = int(hit["d"].sum())
    share = f" ({t * 100 / total:.0f}% of GPU time)" if total else ""
    row = PEAKS.filter(pl.col("GPU") == hit["GPU"][0]).row(0, named=True)
    return (
        f"FP32 GEMMs without tensor cores: {int(hit['n'].sum()):,} GEMMs ran on the CUDA cores for {fmt_ns(t)}"
        f"{share}; this {row['GPU']} has TF32 tensor cores ({row['TF32 (TFLOP/s)']:g} against "
        f"{row['FP32 (TFLOP/s)']:g} TFLOP/s dense): torch.backends.cuda.matmul.allow_tf32 = True (or "
        "torch.set_float32_matmul_precision('high')) lets them use them. The Efficiency view (key 9) and "
        f"`kview efficiency {trace.name} --table tensor-cores` list them."
    )
