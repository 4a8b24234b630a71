"""Kernel categories from the kernel's base name, one family of real kernel names at a time
(taken from the public fixtures where they hold the family)."""

from __future__ import annotations

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.analysis.categories import base_names, category_of, name_categories
from kview.trace import open_trace

from conftest import KINETO, PUBLIC

FAMILIES = {
    "NVIDIA classic": [
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
            "gemm",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
            "gemm",
        ),
        ("ampere_sgemm_128x64_nn", "gemm"),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
            "reduction",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*, float const*, float const*, float const*, float*, float*)",
            "normalization",
        ),
        (
            "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*, float*, float*)",
            "normalization",
        ),
        (
            "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)",
            "attention",
        ),
    ],
    "Hopper nvjet": [
        ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm"),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "gemm"),
    ],
    "Blackwell sm100": [
        (
            "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
            "gemm",
        ),
        (
            "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f",
            "gemm",
        ),
        ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "attention"),
        # a routing kernel whose template arguments mention cutlass is no GEMM
        (
            "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true>)",
            "other",
        ),
    ],
    "AMD Tensile / hipBLASLt / CK / aiter": [
        (
            "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1",
            "gemm",
        ),
        (
            "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1",
            "gemm",
        ),
        ("_ZN2ck59kernel_gemm_xdl_cshuffle_v3_multi_d_blockscale_b_preshuffleINS_58GridwiseGemmE", "gemm"),
        (
            "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeE",
            "normalization",
        ),
        ("_ZN5aiter32fmha_fwd_hd192_hd128_bf16_causalE", "attention"),
        ("_ZN5aiter42fp8gemm_bf16_blockscale_BpreShuffle_32x128E", "gemm"),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_", "normalization"),
        ("attn_fwd", "attention"),
        ("kernel_unified_attention_3d", "attention"),
    ],
    "Triton": [
        ("triton_poi_fused_add_cos_sin_0", "elementwise"),
        ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "normalization"),
        ("triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1", "normalization"),
        ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1", "gemm"),
    ],
    "cuDNN": [
        (
            "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
            "gemm",
        ),
        (
            "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, int)",
            "gemm",
        ),
        ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm"),
        (
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
            "normalization",
        ),
    ],
    "NCCL / RCCL / multimem": [
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "communication"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
            "communication",
        ),
        ("aiter::reduce_scatter_cross_device_store<bf16,8>", "communication"),
    ],
    "fbgemm": [
        (
            "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*, decltype(nullptr) const*, int const*, int const*, int const*, int*, decltype(nullptr)*)",
            "embedding/index",
        ),
        (
            "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>)",
            "embedding/index",
        ),
        (
            "void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>)",
            "embedding/index",
        ),
        (
            "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, int, int, unsigned char*, bool)",
            "elementwise",
        ),
    ],
}
CASES = [(family, name, cat) for family, rows in FAMILIES.items() for name, cat in rows]


@pytest.mark.parametrize("family,name,category", CASES, ids=[f"{f}:{n[:40]}" for f, n, _ in CASES])
def test_category_from_the_base_name(family, name, category):
    assert category_of(name) == category


def test_base_name_drops_return_type_template_arguments_and_parameters():
    names = pl.Series(
        [
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)",
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous "
            "namespace)::OpaqueType<2u>*)",
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256EEEvPT0_",
        ]
    )
    assert base_names(names).to_list() == [
        "vllm::fused_add_rms_norm_kernel",
        "at::native::anon::CatArrayBatchedCopy",
        "aiter::add_rmsnorm_quant_kernel",
    ]
    got = dict(name_categories(names).select("Kernel", "name_category").iter_rows())
    assert [got[n] for n in names] == ["normalization", "elementwise", "normalization"]


def _shares(path):
    a = attribute(open_trace(path, use_cache=False))
    g = a.group_by("Category").agg(pl.col("Duration (ns)").sum())
    total = g["Duration (ns)"].sum()
    return {c: t / total for c, t in g.iter_rows()}, a


def test_amd_traces_are_no_longer_other():
    shares, a = _shares(KINETO / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert shares.get("other", 0) < 0.01 and shares["gemm"] > 0.3 and shares["attention"] > 0.1
    cijk = a.filter(pl.col("Kernel").str.starts_with("Cijk_"))
    assert cijk.height > 100 and set(cijk["Category"]) == {"gemm"} and set(cijk["TC"]) == {True}
    shares, _ = _shares(KINETO / "traces__b200__eager_trace.json.gz")
    assert shares["gemm"] > 0.4


def test_fbgemm_kernels_are_embedding_work_not_gemm():
    _, a = _shares(KINETO / "trace_filter__sampled_rank-0.json.gz")
    emb = a.filter(pl.col("Kernel").str.contains("split_embedding|fbgemm_gpu::permute"))
    assert emb.height > 10 and set(emb["Category"]) == {"embedding/index"}


def test_every_public_trace_has_little_other():
    """On the public traces, what no rule names is a small share of GPU time."""
    for path in [*sorted(KINETO.glob("traces__*.json.gz")), PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"]:
        shares, _ = _shares(path)
        assert shares.get("other", 0) < 0.12, (path.name, shares)
