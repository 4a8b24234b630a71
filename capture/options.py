"""Names of the built-in workloads, passes and dtypes, importable without torch (so `kview
capture --help` and `kview bench --help` work on a machine that has no torch)."""

from __future__ import annotations

MODELS = ("bert", "dlrm", "lm", "ncf")
MODES = ("forward", "backward", "train")
DTYPE_NAMES = ("bf16", "fp16", "fp32")
LM_SIZES = ("tiny", "small", "medium", "large", "xl", "2.7B")
