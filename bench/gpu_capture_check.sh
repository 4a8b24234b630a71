#!/usr/bin/env bash
# Check `kview capture` (nsys backend, and auto) and `kview bench --memory-snapshot` on a GPU
# machine with Nsight Systems. The GPU machine lacks polars, so the captures are checked here
# with sqlite3 and summarized by kview afterwards on the development machine.
#   OUT=/dir bash bench/gpu_capture_check.sh
set -u
OUT=${OUT:?set OUT}
W=$(mktemp -d)
python3 -m pip install -q --no-deps --no-build-isolation --target "$W/site" . >/dev/null 2>&1 || { echo "install failed"; exit 1; }
export PYTHONPATH="$W/site"
cd "$W"
py() { python3 -c "import sys; from kview.capture.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
py lm --size tiny --ctx 64 --mode train --backend nsys --shapes -o "$W/lm-tiny_nsys.sqlite"; echo "capture nsys rc=$?"
py bert --layers 1 --ctx 64 --mode backward --backend auto -o "$W/bert-1l_auto.sqlite"; echo "capture auto rc=$?"
python3 - "$W" <<'PY'
import sqlite3, sys
for name in ("lm-tiny_nsys.sqlite", "bert-1l_auto.sqlite"):
    con = sqlite3.connect(f"{sys.argv[1]}/{name}")
    k = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    seq = con.execute("select count(*) from NVTX_EVENTS where text like '%, seq = %'").fetchone()[0]
    sizes = con.execute("select count(*) from NVTX_EVENTS where text like '%sizes = [[%'").fetchone()[0]
    user = [r[0] for r in con.execute("select distinct text from NVTX_EVENTS where text in "
                                      "('profiled_step','forward_pass','backward_pass','optimizer_step','layer_0','Enc_0')")]
    print(name, "kernels", k, "seq markers", seq, "with sizes", sizes, "user ranges", sorted(user))
PY
python3 - "$W" <<'PY'
import argparse, json, sys
from kview.capture.benchmark import measure
a = argparse.Namespace(size="small", batch=None, layers=None, steps=3)
print(json.dumps(measure("lm", a, 256, "fp32", "train", 1, f"{sys.argv[1]}/snapshot.pickle")))
PY
ls -la "$W"
tar cJf "$OUT/capture_check.tar.xz" -C "$W" lm-tiny_nsys.sqlite bert-1l_auto.sqlite snapshot.pickle
