#!/usr/bin/env bash
# Issue 18 on a GPU machine: the memory timelines of the LM small and the attention table of the LM notes.
# One run, most important first, every step under its own time limit so a slow step costs only itself:
#   1. kview capture --memory (nsys, --cuda-memory-usage) of the LM small forward and train steps (context 128,
#      batch 16, fp32 and bf16, 3 profiled steps: the notes' memory figures), of the tiny LM (test inputs) and of
#      examples/train_tiny.py through `-- COMMAND`; kview bench --memory-snapshot of the LM small train step
#   2. kview bench attention at the notes' sizes: naive fp32 (the notes' table), naive fp32 under an 8 GiB limit
#      (the notes' GPU: the OOM rows), sdpa fp32 and bf16, naive bf16, torch.compile'd naive fp32
# Usage, from a tree holding src/ (kview), examples/ and nsys-env.sh with its .debs:
#   OUT=/dir bash bench/gpu_memory.sh
# Only torch is needed there: every kview command used here runs without polars (JSON output, stdlib sqlite3).
set -u
OUT=${OUT:?set OUT}
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$HERE/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/km; rm -rf "$W"; mkdir -p "$W"
printf 'import importlib, sys\nm = {"bench": "kview.capture.benchmark", "capture": "kview.capture.cli"}[sys.argv[1]]\nsys.exit(importlib.import_module(m).main(sys.argv[2:]))\n' > "$W/kv.py"
T0=$(date +%s)
K() { local lim=$1; shift; echo "== $(( $(date +%s) - T0 ))s: $*" >&2; timeout "$lim" python3 "$W/kv.py" "$@"; echo "rc=$?" >&2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
source "$HERE/nsys-env.sh" >/dev/null
C="capture --backend nsys --memory --force"
for mode in forward train; do
  K 60 $C lm --size tiny --ctx 64 --batch 2 --mode $mode --warmup 1 --steps 2 -o "$W/tiny_${mode}.sqlite"
  for dt in fp32 bf16; do
    K 90 $C lm --size small --ctx 128 --batch 16 --mode $mode --dtype $dt --warmup 2 --steps 3 \
      -o "$W/small_${mode}_${dt}.sqlite"
  done
done
K 60 $C --skip 1 --steps 2 -o "$W/tiny_cmd.sqlite" -- python3 "$HERE/examples/train_tiny.py" --steps 4 --device cuda
K 90 bench lm --size small --ctx 128 --batch 16 --modes train --warmup 2 --steps 2 \
  --memory-snapshot "$W/bench_small_train.pickle" -f json > "$W/bench_small_train.json"
python3 "$HERE/bench/snapshot_facts.py" "$W" 2>&1
(cd "$W" && tar cJf "$OUT/memory_tiny.tar.xz" tiny_*.sqlite tiny_*.pickle)
(cd "$W" && tar cJf "$OUT/memory_small_snapshots.tar.xz" small_*.pickle bench_small_train.*)
(cd "$W" && tar cJf "$OUT/memory_small_traces.tar.xz" small_*.sqlite)
# attention: one JSON per sweep, appended to one tar as each ends (a sweep cut off by time costs only itself)
A() { local name=$1 lim=$2; shift 2; K "$lim" bench attention -f json "$@" > "$W/$name.json"; (cd "$W" && tar rf "$OUT/attention.tar" "$name.json"); }
A attention_naive_fp32 ${ATT_LIMIT:-200}
[ -n "${ONLY_NOTES:-}" ] && { ls -la "$OUT" "$W"; exit 0; }
A attention_naive_fp32_8g 60 --memory-limit 8G
A attention_sdpa 60 --impl sdpa --dtype fp32,bf16 --iters 50
A attention_naive_bf16 60 --dtype bf16 --iters 50
left=$(( 560 - ($(date +%s) - T0) ))
[ "$left" -gt 30 ] && A attention_naive_fp32_compile "$left" --compile --iters 50
ls -la "$OUT" "$W"
