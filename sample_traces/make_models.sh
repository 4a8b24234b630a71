#!/usr/bin/env bash
# How the BERT, DLRM and NCF sample traces were made, and the GPU benchmark table, on a GPU
# machine with Nsight Systems. Usage (repository root, nsys on PATH, CUDA torch):
#   OUT=/some/dir WORK=/tmp/dir bash sample_traces/make_models.sh
# Per workload: <stem>_nsys.sqlite + real `nsys stats` CSVs, and <stem>_torch.json (the
# torch.profiler trace that `kview capture --backend torch` converts into <stem>_torch.sqlite).
set -u
OUT=${OUT:?set OUT}
work=${WORK:-$(mktemp -d)}
python3 -m pip install -q --no-deps --no-build-isolation --target "$work/site" . >/dev/null 2>&1 \
  || { echo "pip install of kview failed" >&2; exit 1; }
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
REPORTS=cuda_gpu_kern_sum,cuda_gpu_kern_gb_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,nvtx_sum,nvtx_pushpop_sum,nvtx_startend_sum,nvtx_kern_sum,nvtx_gpu_proj_sum,cuda_kern_exec_sum,osrt_sum
mkdir -p s
for spec in "bert-2l_seq128_train:--model bert --layers 2 --ctx 128 --batch 4" \
            "dlrm_b32768_train:--model dlrm --batch 32768" \
            "ncf_b1048576_train:--model ncf --batch 1048576"; do
  stem=${spec%%:*}; args=${spec#*:}
  nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --pytorch=autograd-shapes-nvtx \
    --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true -o "s/${stem}_nsys" \
    python3 -m kview.capture.workload $args --mode train --warmup 2 --steps 1 > "s/${stem}.profile.log" 2>&1 \
    || { echo "profile $stem failed"; tail -5 "s/${stem}.profile.log"; }
  nsys export --type sqlite --force-overwrite true -o "s/${stem}_nsys.sqlite" "s/${stem}_nsys.nsys-rep" >/dev/null 2>&1
  rm -f "s/${stem}_nsys.nsys-rep"
  nsys stats --report "$REPORTS" --format csv --force-export false --output "s/${stem}_nsys" "s/${stem}_nsys.sqlite" \
    > "s/${stem}.stats.log" 2>&1 || echo "nsys stats failed on $stem"
  python3 -m kview.capture.workload $args --mode train --warmup 2 --steps 1 --shapes \
    --kineto-json "s/${stem}_torch.json" > /dev/null 2> "s/${stem}.torch.log" || echo "torch capture $stem failed"
done
# The seed's Table 1 shape: small and medium LM, forward / forward+backward / train, warm-up 0, 1 and 5.
python3 - > s/bench_lm.json <<'PY'
import argparse, json
from kview.capture.benchmark import measure
rows = []
for size in ("small", "medium"):
    a = argparse.Namespace(size=size, batch=None, layers=None, steps=10)
    for mode in ("forward", "backward", "train"):
        for w in (0, 1, 5):
            rows.append(measure("lm", a, 512, "fp32", mode, w))
    for mode in ("forward", "train"):
        rows.append(measure("lm", a, 512, "bf16", mode, 5))
print(json.dumps(rows))
PY
ls -la s
