#!/usr/bin/env bash
# The dense benchmark trace of issue 13: a Llama-class Hugging Face model of about 2.7B parameters
# (hidden 2560, 32 layers, 32 heads, SwiGLU 6912, vocab 32000; random weights from a config, fp32,
# AdamW), batch 2 x 512 tokens, 10 training steps after 2 unprofiled ones, captured under Nsight
# Systems with kview's module ranges (--annotate) and op ranges with shapes (--shapes =
# nsys --pytorch=autograd-shapes-nvtx). Needs a GPU with >= 60 GB, nsys on PATH, torch and
# transformers; kview importable (PYTHONPATH=src). Usage: bash bench/make_dense_trace.sh OUT.sqlite
# Made on the lent H100/H200 through bench/gpu_capture_user.sh (PHASE=dense). The capture of
# 2026-11-23 is committed beside this script (dense_llama2.7b_nsys.sqlite.xz, 5 MB): `xz -dk` it and
# tile it with bench/tile_trace.py --distinct-labels; its shape is in bench/RESULTS.md.
set -eu
out=${1:?output .sqlite}
here=$(cd "$(dirname "$0")/.." && pwd)
python3 -c "import sys; from kview.capture.cli import main; sys.exit(main(sys.argv[1:]))" --backend nsys --annotate --shapes --skip 2 --steps 10 -o "$out" -- \
  python3 "$here/examples/train_hf_llama.py" --hidden 2560 --layers 32 --heads 32 --intermediate 6912 \
  --vocab 32000 --seq 512 --batch 2 --steps 12
