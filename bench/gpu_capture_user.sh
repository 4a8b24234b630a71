#!/usr/bin/env bash
# `kview capture -- COMMAND` on the GPU machine, as run for issue 15 (profile your own model):
#   PHASE=acceptance  ResNet-50 (torchvision) and a Hugging Face Llama from a config under nsys with
#                     --annotate, and the --annotate overhead on LM small and ResNet-50
#   PHASE=torch       the same two models with the torch.profiler backend (needs polars there)
#   PHASE=dense       the dense benchmark trace of issue 13 (bench/make_dense_trace.sh)
#   PHASE=ddp         2-rank torchrun DDP: per-rank nsys, one nsys report for both, per-rank torch
# Usage, from a folder holding src/ (kview), examples/, bench/ and nsys-env.sh with its .debs:
#   OUT=/dir PHASE=acceptance bash bench/gpu_capture_user.sh   (OVERHEAD_MODELS= skips the overhead runs)
# The example scripts never import kview; kview runs them unchanged.
set -u
OUT=${OUT:?set OUT}
HERE=$(cd "$(dirname "$0")/.." && pwd)
source "$HERE/nsys-env.sh" >/dev/null
export PYTHONPATH="$HERE/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/kv; mkdir -p "$W"
# kview's capture entry point (the machine has no polars for the rest of kview's CLI until PHASE=torch)
K() { python3 -c "import sys; from kview.capture.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; echo "rc=$?"; }
EX=$HERE/examples
case ${PHASE:?} in
acceptance)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  python3 -c "import torch, torchvision, transformers; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
  K --backend nsys --annotate --skip 3 --steps 2 -o "$W/resnet50_nsys.sqlite" -- python3 "$EX/train_resnet50.py" --steps 6
  K --backend nsys --annotate --skip 2 --steps 2 -o "$W/llama_nsys.sqlite" -- python3 "$EX/train_hf_llama.py" --steps 5
  for m in ${OVERHEAD_MODELS-lm-small resnet50}; do
    python3 "$HERE/bench/annotate_overhead.py" --model $m --mode plain
    python3 "$HERE/bench/annotate_overhead.py" --model $m --mode hooks
    K --backend nsys --skip 5 --steps 20 -o "$W/ovh_${m}.sqlite" -- python3 "$HERE/bench/annotate_overhead.py" --model $m
    K --backend nsys --annotate --skip 5 --steps 20 -o "$W/ovh_${m}_annotate.sqlite" -- python3 "$HERE/bench/annotate_overhead.py" --model $m
  done
  python3 "$HERE/bench/trace_shape.py" "$W"/resnet50_nsys.sqlite "$W"/llama_nsys.sqlite
  tar cJf "$OUT/acceptance_nsys.tar.xz" -C "$W" resnet50_nsys.sqlite llama_nsys.sqlite ;;
torch)
  K --backend torch --annotate --skip 3 --steps 2 --keep-json -o "$W/resnet50_torch.sqlite" -- python3 "$EX/train_resnet50.py" --steps 6
  K --backend torch --annotate --skip 2 --steps 2 --keep-json -o "$W/llama_torch.sqlite" -- python3 "$EX/train_hf_llama.py" --steps 5
  python3 "$HERE/bench/trace_shape.py" "$W"/resnet50_torch.sqlite "$W"/llama_torch.sqlite
  tar cJf "$OUT/acceptance_torch.tar.xz" -C "$W" resnet50_torch.sqlite llama_torch.sqlite resnet50_torch.json.gz llama_torch.json.gz ;;
dense)
  bash "$HERE/bench/make_dense_trace.sh" "$W/dense_llama2.7b_nsys.sqlite"
  python3 "$HERE/bench/trace_shape.py" "$W/dense_llama2.7b_nsys.sqlite"
  xz -T0 -9 -k "$W/dense_llama2.7b_nsys.sqlite" && cp "$W/dense_llama2.7b_nsys.sqlite.xz" "$OUT/" ;;
ddp)
  nvidia-smi --query-gpu=name --format=csv,noheader
  D="torchrun --standalone --nproc-per-node 2 $EX/train_ddp.py --steps 5 --slow-rank 1 --slow-ms 20"
  K --backend nsys --annotate --skip 1 --steps 3 -o "$W/ddp_nsys.sqlite" -- $D
  K --backend nsys --annotate --one-file -o "$W/ddp_nsys_1file.sqlite" -- $D
  K --backend nsys --annotate --one-file --skip 1 --steps 3 -o "$W/ddp_nsys_1file_window.sqlite" -- $D
  python3 "$HERE/bench/trace_shape.py" "$W"/ddp_nsys*.sqlite
  tar cJf "$OUT/ddp_nsys.tar.xz" -C "$W" ddp_nsys.rank0.sqlite ddp_nsys.rank1.sqlite ddp_nsys_1file.sqlite ;;
ddp-torch)
  D="torchrun --standalone --nproc-per-node 2 $EX/train_ddp.py --steps 5 --slow-rank 1 --slow-ms 20"
  K --backend torch --annotate --skip 1 --steps 3 --keep-json -o "$W/ddp_torch.sqlite" -- $D
  python3 "$HERE/bench/trace_shape.py" "$W"/ddp_torch*.sqlite
  tar cJf "$OUT/ddp_torch.tar.xz" -C "$W" ddp_torch.rank0.sqlite ddp_torch.rank1.sqlite ddp_torch.rank0.json.gz ddp_torch.rank1.json.gz ;;
esac
ls -la "$OUT"
