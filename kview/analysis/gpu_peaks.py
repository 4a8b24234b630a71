"""Peak throughput of the GPUs kview knows, and which of them a trace ran on.

Dense peaks (no structured sparsity: the datasheets' starred figures halved) in TFLOP/s for
FP32 (the CUDA / vector cores), TF32, BF16, FP16 and FP8 on tensor / matrix cores, FP32 on AMD's
matrix cores, and memory bandwidth in GB/s, from the vendors' datasheets (one source per row).
An empty cell is a precision the GPU has no tensor path for. AMD MI250/MI250X are two dies per
package and each die is one device in a trace, so their rows hold half of the package's figures.

The GPU comes from the trace (nsys TARGET_INFO_GPU, torch.profiler deviceProperties): by name,
else, for AMD traces that name every GPU "AMD Radeon Graphics" or nothing, by compute-unit count
and architecture (gfx90a with 104 CUs: an MI250 die or MI210, whose figures are the same; 110:
an MI250X die; gfx942 with 304 CUs: MI300X).
"""

from __future__ import annotations

import re

import polars as pl

from kview.errors import UsageError

# gpu, how it is named in traces (regex, case-insensitive; first match wins), FP32, TF32, BF16,
# FP16, FP8, FP32 matrix (AMD), bandwidth GB/s, source
# fmt: off
_ROWS: list[tuple[str, str, float | None, float | None, float | None, float | None, float | None, float | None, float, str]] = [
    # NVIDIA H100 Tensor Core GPU datasheet (2023): SXM5: FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*, 3.35 TB/s
    ("H100 SXM", "H100(?!.*(PCIe|NVL))", 67.0, 494.5, 989.5, 989.5, 1979.0, None, 3350.0,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    # same datasheet, PCIe: FP32 51, TF32 756*, BF16/FP16 1,513*, FP8 3,026*, 2 TB/s
    ("H100 PCIe", "H100.*PCIe", 51.0, 378.0, 756.5, 756.5, 1513.0, None, 2000.0,
     "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    # same datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1,671*, FP8 3,341*, 3.9 TB/s
    ("H100 NVL", "H100.*NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, None, 3900.0,
     "NVIDIA H100 Tensor Core GPU datasheet (NVL)"),
    # NVIDIA H200 Tensor Core GPU datasheet (2024): SXM: FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*, 4.8 TB/s
    ("H200 SXM", "H200(?!.*NVL)", 67.0, 494.5, 989.5, 989.5, 1979.0, None, 4800.0,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    # same datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1,671*, FP8 3,341*, 4.8 TB/s
    ("H200 NVL", "H200.*NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, None, 4800.0,
     "NVIDIA H200 Tensor Core GPU datasheet (NVL)"),
    # NVIDIA HGX B200 datasheet (2024), 8 GPUs: FP32 600 TF, TF32 18 PF*, BF16/FP16 36 PF*, FP8 72 PF*,
    # 64 TB/s; per GPU one eighth
    ("B200", "B200", 75.0, 1125.0, 2250.0, 2250.0, 4500.0, None, 8000.0,
     "NVIDIA HGX B200 datasheet (per GPU)"),
    # NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312; 80GB SXM 2,039 GB/s,
    # 80GB PCIe 1,935 GB/s, 40GB 1,555 GB/s
    ("A100 SXM4 80GB", "A100.*(SXM|PG5).*80|A100 80GB(?!.*PCIe)", 19.5, 156.0, 312.0, 312.0, None, None, 2039.0,
     "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    ("A100 PCIe 80GB", "A100.*PCIe.*80|A100 80GB PCIe", 19.5, 156.0, 312.0, 312.0, None, None, 1935.0,
     "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)"),
    ("A100 40GB", "A100", 19.5, 156.0, 312.0, 312.0, None, None, 1555.0,
     "NVIDIA A100 Tensor Core GPU datasheet (40GB SXM and PCIe)"),
    # NVIDIA L4 datasheet (2023): FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485*, 300 GB/s
    ("L4", r"\bL4\b", 30.3, 60.0, 121.0, 121.0, 242.5, None, 300.0,
     "NVIDIA L4 Tensor Core GPU datasheet"),
    # NVIDIA V100 Tensor Core GPU datasheet (2020): SXM2: FP32 15.7, tensor 125, 900 GB/s (the DGX Station's
    # V100-DGXS: 4 GPUs, 500 TFLOPS tensor, the SXM2 figures); PCIe: 14, 112, 900 GB/s
    ("V100 SXM2", "V100(?!.*PCIe)", 15.7, None, None, 125.0, None, None, 900.0,
     "NVIDIA V100 Tensor Core GPU datasheet (SXM2); DGX Station datasheet for V100-DGXS"),
    ("V100 PCIe", "V100.*PCIe", 14.0, None, None, 112.0, None, None, 900.0,
     "NVIDIA V100 Tensor Core GPU datasheet (PCIe)"),
    # NVIDIA GeForce RTX 3060 specifications (3,584 CUDA cores, 28 SMs, 1.78 GHz boost, 360 GB/s); tensor rates
    # per SM and clock from the NVIDIA Ampere GA102 whitepaper (GeForce: FP16/BF16 with FP32 accumulate 512,
    # TF32 256 FLOP per SM per clock, dense)
    ("GeForce RTX 3060", "RTX 3060(?! Ti)", 12.7, 12.7, 25.5, 25.5, None, None, 360.0,
     "NVIDIA GeForce RTX 3060 specifications; NVIDIA Ampere GA102 GPU architecture whitepaper (rates per SM)"),
    # NVIDIA GeForce RTX 2070 SUPER specifications (2,560 CUDA cores, 40 SMs, 1.77 GHz boost, 448 GB/s); tensor
    # rate per SM and clock from the NVIDIA Turing architecture whitepaper (GeForce: FP16 with FP32 accumulate
    # 512 FLOP per SM per clock)
    ("GeForce RTX 2070 SUPER", "RTX 2070 SUPER", 9.1, None, None, 36.3, None, None, 448.0,
     "NVIDIA GeForce RTX 2070 SUPER specifications; NVIDIA Turing GPU architecture whitepaper (rates per SM)"),
    # AMD Instinct MI300X data sheet: FP32 vector 163.4, TF32 653.7, BF16/FP16 1,307.4, FP8 2,614.9 (dense),
    # FP32 matrix 163.4, 5.3 TB/s
    ("MI300X", "MI300X", 163.4, 653.7, 1307.4, 1307.4, 2614.9, 163.4, 5300.0,
     "AMD Instinct MI300X data sheet"),
    # AMD Instinct MI250X data sheet (package of two dies): FP32 vector 47.9, matrix 95.7, BF16/FP16 383,
    # 3.2768 TB/s; one die (one device) half of it
    ("MI250X (one die)", "MI250X", 23.95, None, 191.5, 191.5, None, 47.85, 1638.4,
     "AMD Instinct MI250X data sheet (package figures halved: one die)"),
    # AMD Instinct MI250 data sheet (package of two dies): FP32 vector 45.3, matrix 90.5, BF16/FP16 362.1,
    # 3.2768 TB/s; one die half of it, which are the AMD Instinct MI210 data sheet's figures (22.6, 45.3, 181.0,
    # 1.6384 TB/s)
    ("MI250 (one die) / MI210", "MI250|MI210", 22.6, None, 181.0, 181.0, None, 45.3, 1638.4,
     "AMD Instinct MI250 data sheet (package figures halved: one die) = AMD Instinct MI210 data sheet"),
]
# fmt: on
# fmt: on

PEAKS = pl.DataFrame(
    [
        {
            "GPU": r[0],
            "FP32 (TFLOP/s)": r[2],
            "TF32 (TFLOP/s)": r[3],
            "BF16 (TFLOP/s)": r[4],
            "FP16 (TFLOP/s)": r[5],
            "FP8 (TFLOP/s)": r[6],
            "FP32 matrix (TFLOP/s)": r[7],
            "Memory (GB/s)": r[8],
            "Source": r[9],
        }
        for r in _ROWS
    ],
    schema={
        "GPU": pl.String,
        "FP32 (TFLOP/s)": pl.Float64,
        "TF32 (TFLOP/s)": pl.Float64,
        "BF16 (TFLOP/s)": pl.Float64,
        "FP16 (TFLOP/s)": pl.Float64,
        "FP8 (TFLOP/s)": pl.Float64,
        "FP32 matrix (TFLOP/s)": pl.Float64,
        "Memory (GB/s)": pl.Float64,
        "Source": pl.String,
    },
)
_BY_NAME = [(re.compile(r[1], re.IGNORECASE), r[0]) for r in _ROWS]
# AMD devices named "AMD Radeon Graphics" (or not at all): (major, minor, compute units) -> GPU
_AMD_BY_CUS = {(9, 0, 104): "MI250 (one die) / MI210", (9, 0, 110): "MI250X (one die)", (9, 4, 304): "MI300X"}


def _key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def gpu_of(
    name: str | None, sm_count: int | None = None, major: int | None = None, minor: int | None = None
) -> str | None:
    """The PEAKS row of a device: by its name, else (AMD) by compute units and architecture."""
    if name:
        for rx, gpu in _BY_NAME:
            if rx.search(name):
                return gpu
    if (not name or "radeon" in name.lower() or name.upper().startswith("AMD")) and sm_count is not None:
        return _AMD_BY_CUS.get((major or 0, minor or 0, sm_count))
    return None


def named_gpu(text: str) -> str:
    """`--gpu TEXT` -> a PEAKS row (`h100-sxm`, `H200`, `mi300x`); UsageError when none matches."""
    want = _key(text)
    names = PEAKS["GPU"].to_list()
    exact = [g for g in names if _key(g) == want]
    if exact:
        return exact[0]
    hit = gpu_of(text)
    if hit:
        return hit
    raise UsageError(f"no peaks known for {text!r} (known: {', '.join(names)})", what="--gpu")


def device_gpus(devices: pl.DataFrame, override: str | None = None) -> pl.DataFrame:
    """Device (id), Name (as the trace says), GPU (the PEAKS row, null when unknown), How."""
    schema = {"Device": pl.Int64, "Name": pl.String, "GPU": pl.String, "How": pl.String}
    col = {c: c in devices.columns for c in ("name", "smCount", "computeMajor", "computeMinor")}
    rows: list[tuple] = []
    for d in devices.unique("id", keep="first", maintain_order=True).iter_rows(named=True):
        name = d.get("name") if col["name"] else None
        if override:
            rows.append((d["id"], name, override, "--gpu"))
            continue
        by_name = gpu_of(name) if name else None
        if by_name:
            rows.append((d["id"], name, by_name, "name"))
            continue
        by_cus = (
            gpu_of(
                None,
                d.get("smCount") if col["smCount"] else None,
                d.get("computeMajor") if col["computeMajor"] else None,
                d.get("computeMinor") if col["computeMinor"] else None,
            )
            if not name or "radeon" in name.lower() or name.upper().startswith("AMD")
            else None
        )
        rows.append((d["id"], name, by_cus, "compute units and architecture" if by_cus else "unknown"))
    return pl.DataFrame(rows, schema=schema, orient="row")
