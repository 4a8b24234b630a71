#!/usr/bin/env bash
# The reports that pair NVTX ranges with ranges or calls (nvtx_gpu_proj_sum, nvtx_kern_sum) on
# a trace with a start/end range beside its pushed ones: a copy of each trace with one start/end
# range per thread around most of its run (as `torch.cuda.nvtx.range_start` around a training
# loop). Each report cold, in its own process: whole-process wall and CPU time and peak RSS
# from /usr/bin/time, one table row each.
#
#   bash bench/start_end_ranges.sh [TRACE.sqlite ...] > start_end.md   # default: the LM sample
#
# Runs `kview` and `python` from PATH (activate the checkout's environment first); run two
# checkouts alternately for an A/B. GB = 10^9 B.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- "$here/sample_traces/lm-small_ctx256_train_nsys.sqlite"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache
echo "| trace | ranges | report | wall s | CPU s | peak GB |"
echo "|---|---:|---|---:|---:|---:|"
for trace in "$@"; do
  copy=$tmp/$(basename "$trace")
  cp "$trace" "$copy"
  ranges=$(python - "$copy" <<'EOF'
import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as con:
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT min(start) + 1, max(end) - 1, "
        "60, 'most of the run', globalTid FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY globalTid"
    )
    print(con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0])
EOF
)
  for report in nvtx_gpu_proj_sum nvtx_kern_sum; do
    if /usr/bin/time -o "$tmp/t" -f "%e %U %S %M" kview stats "$copy" --no-cache -r "$report" -f csv > /dev/null 2> "$tmp/err"; then
      read -r wall user sys kb < "$tmp/t"
      cpu_gb=$(python -c "import sys; u, s, k = map(float, sys.argv[1:]); print(f'{u + s:.2f} | {k * 1024 / 1e9:.3f}')" "$user" "$sys" "$kb")
      echo "| $(basename "$trace") | $ranges | $report | $wall | $cpu_gb |"
    else
      echo "| $(basename "$trace") | $ranges | $report | failed: $(tail -1 "$tmp/err") | | |"
    fi
  done
done
