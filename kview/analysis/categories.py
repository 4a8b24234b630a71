"""Kernel categories (gemm, attention, communication, ...) from the kernel's base name.

Rules match the base name: the demangled name without its return type, template arguments
and parameter list (`void at::native::reduce_kernel<512, 1, ...>(...)` -> `at::native::
reduce_kernel`), so words inside template arguments (`fbgemm_gpu::` in an embedding kernel's
arguments, `cutlass::bfloat16_t` in a routing kernel's) never decide. Wrappers whose meaning
lives in their first template arguments (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`,
`multi_tensor_apply_kernel<..., AdamFunctor<float>>`) are matched with those arguments too.
Rules are grouped by vendor family; the first category whose rules match wins. Everything
is computed once per distinct name.
"""

from __future__ import annotations

from typing import Any

import polars as pl

# Kernels named only by their wrapper: the rules also see the template arguments.
WRAPPERS = r"^cutlass::(kernel2?|device_kernel)$|multi_tensor_apply_kernel$|^ck_tile::kentry$"

# (category, rules) in precedence order; each rule is a regex over the lower-cased base name,
# with `fbgemm` spelled `fbg` first (FBGEMM's embedding kernels are no GEMMs).
RULES: list[tuple[str, dict[str, str]]] = [
    (
        "communication",
        {
            "NCCL/RCCL": r"^nccl|^rccl|^msccl|nccl(dev)?kernel",
            "multimem / symmetric memory / custom all-reduce": r"multimem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|nvshmem|sendrecv",
        },
    ),
    (
        "attention",
        {
            "FlashAttention / FMHA (NVIDIA, CK, aiter)": r"flash|fmha|mha_(fwd|bwd|varlen)|sdpa",
            "named attention kernels (Triton, vLLM, aiter)": r"attention|attn_fwd|attn_bwd|attn_kernel|sage_fwd|sage_bwd|"
            r"^aiter::(pa_|mla_)",
        },
    ),
    (
        "normalization",
        {
            "PyTorch / Apex": r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|welford|gammabetabackward|"
            r"rowwisemoments|cuapplylayernorm|cucomputepartgradgammabeta|cucomputegradgammabeta",
            "cuDNN batch norm": r"^cudnn::bn_|bn_fw_|bn_bw_",
            "Triton (Inductor)": r"^triton_(red|per)_fused.*(rsqrt|native_layer_norm|native_group_norm|var_mean)",
        },
    ),
    (
        "gemm",
        {
            "NVIDIA classic (cuBLAS, CUTLASS, xmma)": r"gemm|gemv|cutlass|xmma|cublas|tensorop|wgmma|hmma|_mma_|"
            r"splitkreduce|dot_kernel",
            "Hopper nvjet": r"^nvjet_",
            "Blackwell sm100 (TRT-LLM batched GEMM)": r"^bmm_|_bmm_|sm100.*(gemm|mma)|^gemm_",
            "AMD Tensile / hipBLASLt / CK / aiter": r"^cijk_|^custom_cijk|hipblaslt|wv_?splitk|kernel_gemm|ck::.*gemm|"
            r"^aiter::.*(gemm|fmoe)|fused_moe|moe_gemm",
            "Triton / Inductor templates": r"matmul|^triton_tem_fused",
            "cuDNN convolutions (implicit GEMM, Winograd, FFT)": r"scudnn|convolve|conv(_|olution|\d|$)|winograd|im2col|fft2d|wgrad|dgrad|fprop|^cudnn::|^cudnn_",
        },
    ),
    (
        "softmax",
        {
            "PyTorch / Triton": r"softmax|^triton_(red|per)_fused.*_amax_.*exp",
        },
    ),
    (
        "elementwise",
        {
            "quantization": r"quantiz|dequant|fp8_quant|_to_float|float_to_",
        },
    ),
    (
        "embedding/index",
        {
            "PyTorch": r"index|gather|scatter|embedding|embs|take_along",
            "FBGEMM / TorchRec": r"^fbg_gpu::|bounds_check|bucketize|jagged|lengths",
        },
    ),
    (
        "optimizer",
        {
            "fused optimizers": r"adam|sgd|lamb|adagrad|rmsprop|lion",
        },
    ),
    (
        "reduction",
        {
            "PyTorch / CUB": r"reduce|cub::|radix|scan|^sum_|_sum_|argmax|argmin|max_|min_|topk|sort",
            "Triton (Inductor)": r"^triton_(red|per)_",
        },
    ),
    (
        "elementwise",
        {
            "PyTorch / Triton": r"elementwise|vectorized|unrolled|pointwise|fill|copy|cat_?array|^triton_poi_|"
            r"silu|gelu|relu|dropout|activation|transpose|nchwtonhwc|nhwctonchw",
        },
    ),
]

# Tensor-core kernels by name (PyProf's list, Hopper's nvjet/wgmma, flash attention, AMD's
# MFMA tile names `MI16x16x1`, FP8/FP4 and bf16 tiles of Blackwell).
TC_RE = (
    r"hmma|wgmma|tensorop|s1688|h1688|i8816|16816|884gemm|1688gemm|_tf32|bf16|bfloat16|f16f16|e4m3|e5m2|e2m1|"
    r"xmma_gemm_(?:bf16|f16|tf32)|nvjet|flash|fmha|_mi\d+x\d+x\d+_"
)


def _itanium_nested_name(mangled: str) -> str:
    """`_ZN5aiter24add_rmsnorm_quant_kernelIDF16b...` -> `aiter::add_rmsnorm_quant_kernel`: the
    nested name of a mangled symbol (AMD traces often carry those), without a demangler."""
    parts, i = [], 3 if mangled.startswith("_ZN") else 2
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while j < len(mangled) and mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        parts.append(mangled[j : j + n])
        i = j + n
    return "::".join(parts) or mangled


def base_names(names: pl.Series) -> pl.Series:
    """`void cudnn::detail::dgrad_engine<float, 512>(int, ...)` -> `cudnn::detail::dgrad_engine`,
    `_ZN5aiter24add_rmsnorm_quant_kernelI...` -> `aiter::add_rmsnorm_quant_kernel`."""
    mangled = names.str.starts_with("_Z")
    if mangled.any():
        m = names.filter(mangled).unique()
        table = pl.DataFrame({"n": m, "b": [_itanium_nested_name(v) for v in m.to_list()]})
        names = (
            pl.DataFrame({"n": names})
            .join(table, on="n", how="left", maintain_order="left")
            .select(pl.coalesce("b", "n"))
            .to_series()
            .alias(names.name)
        )
    s = names.str.replace_all("(anonymous namespace)", "anon", literal=True)
    for _ in range(12):  # innermost brackets first: parameter lists hold templates and vice versa
        s = s.str.replace_all(r"\([^()]*\)", "").str.replace_all(r"<[^<>]*>", "")
    # what is left of a return type (`void`, `std::enable_if::type`) comes before the last space
    return s.str.strip_chars().str.split(" ").list.last().alias(names.name)


def _keys(names: pl.Series) -> pl.Series:
    """What the rules see: the lower-cased base name, plus the template arguments of wrappers."""
    base = base_names(names).str.to_lowercase()
    args = (
        pl.select(
            pl.when(names.str.starts_with("_Z"))
            .then(names)  # a mangled wrapper: all of it
            .otherwise(
                names.str.replace_all("(anonymous namespace)", "anon", literal=True).str.extract(r"^[^<(]*<(.*)>", 1)
            )
        )
        .to_series()
        .fill_null("")
        .str.to_lowercase()
    )
    key = pl.select(
        pl.when(base.str.contains(WRAPPERS)).then(pl.concat_str([base, pl.lit(" "), args])).otherwise(base)
    ).to_series()
    return key.str.replace_all("fbgemm", "fbg", literal=True)


def _rule_expr(key: pl.Expr) -> pl.Expr:
    expr: Any = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.String))  # Then, then ChainedThen
    for category, rules in RULES:
        expr = expr.when(key.str.contains("|".join(f"(?:{r})" for r in rules.values()))).then(pl.lit(category))
    return expr.otherwise(pl.lit(None, dtype=pl.String))


def name_categories(names: pl.Series) -> pl.DataFrame:
    """Kernel name -> (`name_category`, `tc`) once per distinct name; `name_category` is null
    when no rule matches (the caller may still place the kernel by its op). Kept in the frame
    cache by `attribution` and `timeline.gpu`: a change of these rules changes their versions."""
    uniq = names.drop_nulls().unique()
    key = _keys(uniq)
    full = uniq.str.to_lowercase()
    return pl.DataFrame({"Kernel": uniq, "_key": key, "_full": full}).select(
        "Kernel",
        _rule_expr(pl.col("_key")).alias("name_category"),
        (pl.col("_full").str.contains(TC_RE) & ~pl.col("_full").str.contains("ffma|sgemm|scudnn")).alias("tc"),
    )


def category_of(name: str) -> str:
    """The category of one kernel name by its name alone ("other" when no rule matches)."""
    got = name_categories(pl.Series([name]))["name_category"][0]
    return got or "other"


# every category a kernel table can hold: the named ones, copies and memsets, and the rest
CATEGORIES = tuple(dict.fromkeys([c for c, _ in RULES] + ["memcpy", "memset", "other"]))
