#!/usr/bin/env bash
# Every target of issue 28 (Scale II), each measure in its own process, whole-process wall and CPU
# time and peak RSS from /usr/bin/time, printed as one table: measure, wall, CPU, peak RSS, target, met?
#
#   bash bench/scale2.sh DENSE.sqlite [KINETO.json] > scale2.md
#
# DENSE: a dense tiled trace (bench/make_dense_trace.sh's capture tiled with bench/tile_trace.py
# --distinct-labels, e.g. x25: 1,142,750 kernels, 5,724,800 NVTX rows); run once per dense trace
# (the second model too). KINETO: a torch.profiler JSON of ~163 MB / ~557k events (bench/tile_json.py);
# left out, that row is skipped. FLOORS=1 adds the floors (the reads alone, by the same library, on
# the same file). PAIRS=5 sets the pairs of the kernel-summary ratio. Cold = --no-cache. GB = 10^9 B.
# Runs `kview` and `python` from PATH (activate the checkout's environment first).
set -eu
dense=${1:?usage: bash bench/scale2.sh DENSE.sqlite [KINETO.json]}
kineto=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
small=$here/sample_traces/lm-small_ctx256_train_nsys.sqlite
pairs=${PAIRS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache  # an empty cache: nothing of an earlier run is read

# measure NAME TARGET_S TARGET_GB CMD...: one row; TARGET_GB "-" for none, TARGET_S "-" for a floor
measure() {
  local name=$1 ts=$2 tgb=$3
  shift 3
  if ! /usr/bin/time -o "$tmp/t" -f "%e %U %S %M" "$@" > /dev/null 2> "$tmp/err"; then
    echo "| $name | failed: $(tail -1 "$tmp/err") | | | | |"
    return
  fi
  read -r wall user sys kib < "$tmp/t"
  python3 - "$name" "$wall" "$user" "$sys" "$kib" "$ts" "$tgb" <<'EOF'
import sys
name, wall, user, sys_, kib, ts, tgb = sys.argv[1:]
wall, cpu, gb = float(wall), float(user) + float(sys_), int(kib) * 1024 / 1e9
if ts == "-":  # a floor: no target
    print(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {gb:.3f} GB | - | - |")
    sys.exit(0)
met = wall <= float(ts) and (tgb == "-" or gb <= float(tgb))
target = f"<= {ts} s" + ("" if tgb == "-" else f", <= {tgb} GB")
print(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {gb:.3f} GB | {target} | {'met' if met else 'MISSED'} |")
EOF
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(python3 -c 'import platform; print(platform.processor() or platform.machine())')"
echo "dense: $dense ($(python3 -c "import sqlite3,sys; c=sqlite3.connect('file:'+sys.argv[1]+'?mode=ro&immutable=1', uri=True); print(c.execute('select count(*) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0], 'kernels,', c.execute('select count(*) from NVTX_EVENTS').fetchone()[0], 'NVTX rows')" "$dense"))"
echo
echo "| measure | wall | CPU | peak RSS | target | met? |"
echo "|---|---:|---:|---:|---|---|"
measure "kview --help" 0.15 - kview --help
measure "kernel summary, 3k-kernel trace (table)" 0.3 - kview stats "$small" -r cuda_gpu_kern_sum
measure "kernels -f csv, cold" 10 2 kview kernels "$dense" -f csv --no-cache
measure "nvtx_gpu_proj_sum, cold" 8 2 kview stats "$dense" -r nvtx_gpu_proj_sum -f csv --no-cache
measure "nvtx_kern_sum, cold" 8 2 kview stats "$dense" -r nvtx_kern_sum -f csv --no-cache
measure "nvtx_sum, cold" 4 - kview stats "$dense" -r nvtx_sum -f csv --no-cache
measure "overview, cold" 8 1.5 kview overview "$dense" --no-cache
if [ -n "$kineto" ]; then
  measure "torch.profiler JSON load" 3 0.5 python -c "import sys; from kview.trace import open_trace; t = open_trace(sys.argv[1], use_cache=False); t.columns('kernels', ['start']); t.nvtx_events" "$kineto"
fi

# the kernel summary against stdlib sqlite3's plain GROUP BY, same file, alternating, median ratio
sql="SELECT demangledName, count(*), sum(end - start), avg(end - start), min(end - start), max(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName"
ratios=()
for _ in $(seq "$pairs"); do
  /usr/bin/time -o "$tmp/a" -f "%e" python3 -c "import sqlite3,sys; sqlite3.connect('file:'+sys.argv[1]+'?mode=ro&immutable=1', uri=True).execute(sys.argv[2]).fetchall()" "$dense" "$sql"
  /usr/bin/time -o "$tmp/b" -f "%e" kview stats "$dense" -r cuda_gpu_kern_sum -f csv --no-cache > /dev/null
  ratios+=("$(cat "$tmp/b") $(cat "$tmp/a")")
done
python3 - "${ratios[@]}" <<'EOF'
import statistics, sys
pairs = [tuple(map(float, p.split())) for p in sys.argv[1:]]
r = statistics.median(k / s for k, s in pairs)
print(f"| cuda_gpu_kern_sum cold / sqlite3 GROUP BY (median of {len(pairs)} pairs; kview "
      f"{statistics.median(k for k, _ in pairs):.2f} s, sqlite3 {statistics.median(s for _, s in pairs):.2f} s) "
      f"| {r:.2f}x | | | <= 0.35x | {'met' if r <= 0.35 else 'MISSED'} |")
EOF

if [ "${FLOORS:-0}" = 1 ]; then
  echo
  echo "Floors (the read alone, by the same library, on the same file):"
  echo
  echo "| read | wall | CPU | peak RSS | target | met? |"
  echo "|---|---:|---:|---:|---|---|"
  cx="import os, sys, connectorx as cx; os.environ['RUST_LOG'] = 'off'; from kview.io.sqlite_source import connectorx_url; from pathlib import Path; u = connectorx_url(Path(sys.argv[1]).absolute())"
  measure "kernel start, end, name (connectorx, 2 partitions)" - - python -c "$cx; hi = cx.read_sql(u, 'SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL', return_type='polars').item(); h = hi // 2 + 1; cx.read_sql(u, [f'SELECT start, end, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid < {h}', f'SELECT start, end, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid >= {h}'], return_type='polars')" "$dense"
  measure "NVTX ranges with text (kview's reader, nsys_reader.nvtx_events)" - - python -c "import sys; from kview.io.nsys_reader import NsysSource; from pathlib import Path; NsysSource(Path(sys.argv[1]).absolute()).nvtx_events()" "$dense"
  measure "polars import" - - python -c "import polars"
  measure "interpreter start" - - python -c "pass"
fi
