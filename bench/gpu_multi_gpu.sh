#!/usr/bin/env bash
# The multi-GPU run (issue 32) and the memory captures (issue 30), on a lent machine of NPROC GPUs.
#   PHASE=dist    HF Llama (examples/train_hf_llama.py, 168M parameters, batch 4 x 512 per rank) under
#                 torchrun --nproc-per-node NPROC with DDP and with FSDP2, rank 1 slowed by 20 ms a step:
#                 one nsys report per rank, the DDP run as one nsys report of every process, and the
#                 torch backend (DDP, FSDP)
#   PHASE=memory  torch.profiler profile_memory=True, and nsys --cuda-memory-usage=true (one GPU)
#   PHASE=nsys, PHASE=more: the same as dist split in two calls (how the 2-GPU captures were made)
# Usage, from the repository root holding src/, examples/, bench/ and .device/ (nsys-env.sh and its .debs),
# with polars and its needs unpacked at /tmp/site (torch backend only):
#   OUT=/dir NPROC=4 PHASE=dist bash bench/gpu_multi_gpu.sh
set -u
OUT=${OUT:?set OUT}
HERE=$(cd "$(dirname "$0")/.." && pwd)
source "$HERE/.device/nsys-env.sh" >/dev/null
# NVLink multicast stays off on shared hosts (the lent machine's rule)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$HERE/src:/tmp/site" PYTHONUNBUFFERED=1
W=/tmp/kv; mkdir -p "$W"
K() { python3 -c "import sys; from kview.capture.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; echo "rc=$?"; }
EX=$HERE/examples
NPROC=${NPROC:-2}
RUN() { echo "torchrun --standalone --nproc-per-node $NPROC $EX/train_hf_llama.py --dist $1 --steps 6 --slow-rank 1 --slow-ms 20"; }
per_rank() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'transformers', transformers.__version__)"
  for d in ddp fsdp; do
    K --backend nsys --annotate --skip 2 --steps 3 -o "$W/llama_${d}_nsys.sqlite" -- $(RUN $d)
  done
}
memory() {
  python3 "$HERE/bench/capture_profile_memory.py" --out "$W/mem_torch.json.gz"
  nsys profile --trace=cuda,nvtx --cuda-memory-usage=true --sample=none --cpuctxsw=none -o "$W/mem_nsys" --force-overwrite true \
    python3 "$EX/train_hf_llama.py" --steps 3 --layers 2 --hidden 512 --heads 8 --intermediate 1408 --vocab 8000 --seq 256 --batch 2
  nsys export --type sqlite --force-overwrite true -o "$W/mem_nsys.sqlite" "$W/mem_nsys.nsys-rep"
  tar cJf "$OUT/mem.tar.xz" -C "$W" mem_torch.json.gz mem_nsys.sqlite mem_nsys.nsys-rep
}
one_file_and_torch() {
  K --backend nsys --annotate --one-file --skip 2 --steps 3 -o "$W/llama_ddp_nsys_1file.sqlite" -- $(RUN ddp)
  # OS runtime rows of torchrun and its helpers dwarf the rest; the fixture keeps everything else as exported
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [c.execute(f'DELETE FROM {t}') for (t,) in c.execute(\"SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'OSRT%'\").fetchall()]; c.commit(); c.execute('VACUUM')" "$W/llama_ddp_nsys_1file.sqlite"
  for d in ddp fsdp; do
    K --backend torch --annotate --skip 2 --steps 3 --keep-json -o "$W/llama_${d}_torch.sqlite" -- $(RUN $d)
  done
}
case ${PHASE:?} in
dist)
  per_rank; one_file_and_torch
  python3 "$HERE/bench/trace_shape.py" "$W"/llama_*.sqlite
  tar cJf "$OUT/llama_dist_nsys.tar.xz" -C "$W" $(cd "$W" && ls llama_*_nsys.rank*.sqlite) llama_ddp_nsys_1file.sqlite
  tar cJf "$OUT/llama_dist_torch.tar.xz" -C "$W" $(cd "$W" && ls llama_*_torch.rank*.sqlite) ;;
memory) memory ;;
nsys)
  per_rank; memory
  tar cJf "$OUT/llama_dist_nsys.tar.xz" -C "$W" $(cd "$W" && ls llama_*_nsys.rank*.sqlite) ;;
more)
  one_file_and_torch
  tar cJf "$OUT/llama_dist_more.tar.xz" -C "$W" llama_ddp_nsys_1file.sqlite $(cd "$W" && ls llama_*_torch.rank*) ;;
esac
ls -la "$OUT"
