#!/usr/bin/env bash
# How the LM sample traces and their reference CSVs were made, on a GPU machine with Nsight Systems.
# Usage (from the repository root, nsys on PATH, torch with CUDA installed):
#   OUT=/some/dir [WORK=/tmp/dir] bash sample_traces/make_samples.sh [SIZE] [CTX]
# Writes into $WORK/s, per mode: <stem>.sqlite (nsys export), <stem>_<report>.csv (real
# `nsys stats` output) and lm-..._torch.json (torch.profiler trace of the same workload).
set -u
SIZE=${1:-small}
CTX=${2:-256}
OUT=${OUT:?set OUT}
work=${WORK:-$(mktemp -d)}
python3 -m pip install -q --no-deps --no-build-isolation --target "$work/site" . >/dev/null 2>&1 \
  || { echo "pip install of kview failed" >&2; exit 1; }
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"  # outside the checkout
nsys --version
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
nsys stats --help-reports > "$OUT/nsys_help_reports.txt" 2>&1
WANT="cuda_gpu_kern_sum cuda_gpu_kern_gb_sum cuda_api_sum cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum nvtx_sum nvtx_pushpop_sum nvtx_startend_sum nvtx_kern_sum nvtx_gpu_proj_sum cuda_kern_exec_sum osrt_sum"
HAVE=""
for r in $WANT; do grep -qE "^ *$r( |\[|$)" "$OUT/nsys_help_reports.txt" && HAVE="$HAVE,$r"; done
HAVE=${HAVE#,}
echo "reports: $HAVE"
echo "$HAVE" > "$work/reports.txt"

mkdir -p "$work/s"
for mode in forward backward train; do
  stem="lm-${SIZE}_ctx${CTX}_${mode}_nsys"
  nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none \
    --pytorch=autograd-shapes-nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
    --force-overwrite true -o "$work/s/$stem" \
    python3 -m kview.capture.workload --size "$SIZE" --ctx "$CTX" --mode "$mode" --warmup 2 --steps 1 \
    > "$work/s/$stem.profile.log" 2>&1 || { echo "profile $mode failed"; tail -20 "$work/s/$stem.profile.log"; }
  nsys export --type sqlite --force-overwrite true -o "$work/s/$stem.sqlite" "$work/s/$stem.nsys-rep" >/dev/null 2>&1
  rm -f "$work/s/$stem.nsys-rep"
  nsys stats --report "$HAVE" --format csv --force-export false --output "$work/s/$stem" "$work/s/$stem.sqlite" \
    > "$work/s/$stem.stats.log" 2>&1 || echo "nsys stats failed on $stem"
  python3 -m kview.capture.workload --size "$SIZE" --ctx "$CTX" --mode "$mode" --warmup 2 --steps 1 \
    --shapes --kineto-json "$work/s/lm-${SIZE}_ctx${CTX}_${mode}_torch.json" > /dev/null 2>&1 \
    || echo "torch.profiler capture $mode failed"
done
ls -la "$work/s"
