"""`kview stats` output: files named like nsys, and every format carrying the same numbers."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

from conftest import LM_TRACES

TRACE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")
GOLDEN = TRACE.with_name(f"{TRACE.stem}_cuda_gpu_kern_sum.csv")


def _run(*args):
    r = subprocess.run([sys.executable, "-m", "kview.cli", "stats", str(TRACE), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_output_prefix_writes_one_file_per_report_named_like_nsys(tmp_path):
    _run("-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "csv", "-o", str(tmp_path / "run"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_cuda_api_sum.csv", "run_cuda_gpu_kern_sum.csv"]
    assert (tmp_path / "run_cuda_gpu_kern_sum.csv").read_text() == GOLDEN.read_text()


def test_default_reports_follow_each_other_under_titles():
    out = _run()
    titles = [line for line in out.splitlines() if line.startswith("** ")]
    assert [t.rsplit("(", 1)[1].rstrip("):") for t in titles] == [
        "nvtx_sum", "osrt_sum", "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"]


def test_json_md_tsv_table_carry_the_golden_values():
    golden = list(csv.DictReader(io.StringIO(GOLDEN.read_text())))
    top = golden[0]
    rows = json.loads(_run("-r", "cuda_gpu_kern_sum", "-f", "json").split("\n", 2)[2])
    assert len(rows) == len(golden)
    assert rows[0]["Name"] == top["Name"] and rows[0]["Total Time (ns)"] == int(top["Total Time (ns)"])
    assert rows[0]["Avg (ns)"] == float(top["Avg (ns)"])
    md = _run("-r", "cuda_gpu_kern_sum", "-f", "md").splitlines()
    assert md[2].startswith("| Time (%) |") and md[3].startswith("|---:")
    assert f"| {top['Total Time (ns)']} |" in md[4]
    tsv = _run("-r", "cuda_gpu_kern_sum", "-f", "tsv").splitlines()
    assert tsv[2].split("\t")[0] == "Time (%)" and tsv[3].split("\t")[1] == top["Total Time (ns)"]
    table = _run("-r", "cuda_gpu_kern_sum", "-f", "table")
    assert f"{int(top['Total Time (ns)']):,}" in table
