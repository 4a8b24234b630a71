"""`kview stats` output: files named like nsys, and every format carrying the same numbers."""

from __future__ import annotations

import csv
import io
import json

from conftest import LM_TRACES
from in_process import kview_here

TRACE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")
GOLDEN = TRACE.with_name(f"{TRACE.stem}_cuda_gpu_kern_sum.csv")


def _run(*args, trace=TRACE, code=0, cmd="stats"):
    r = kview_here(cmd, str(trace), *args)
    assert r.returncode == code, r.stderr
    return r.stdout if code == 0 else r.stderr


def test_output_prefix_writes_one_file_per_report_named_like_nsys(tmp_path):
    _run("-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "csv", "-o", str(tmp_path / "run"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_cuda_api_sum.csv", "run_cuda_gpu_kern_sum.csv"]
    assert (tmp_path / "run_cuda_gpu_kern_sum.csv").read_text() == GOLDEN.read_text()


def test_default_reports_follow_each_other_under_titles():
    out = _run()
    titles = [line for line in out.splitlines() if line.startswith("** ")]
    assert [t.rsplit("(", 1)[1].rstrip("):") for t in titles] == [
        "nvtx_sum",
        "osrt_sum",
        "cuda_api_sum",
        "cuda_gpu_kern_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
    ]


def test_json_md_tsv_table_carry_the_golden_values():
    golden = list(csv.DictReader(io.StringIO(GOLDEN.read_text())))
    top = golden[0]
    rows = json.loads(_run("-r", "cuda_gpu_kern_sum", "-f", "json"))
    assert len(rows) == len(golden)
    assert rows[0]["Name"] == top["Name"] and rows[0]["Total Time (ns)"] == int(top["Total Time (ns)"])
    assert rows[0]["Avg (ns)"] == float(top["Avg (ns)"])
    md = _run("-r", "cuda_gpu_kern_sum", "-f", "md").splitlines()
    assert md[0].startswith("| Time (%) |") and md[1].startswith("|---:")
    assert f"| {top['Total Time (ns)']} |" in md[2]
    tsv = _run("-r", "cuda_gpu_kern_sum", "-f", "tsv").splitlines()
    assert tsv[0].split("\t")[0] == "Time (%)" and tsv[1].split("\t")[1] == top["Total Time (ns)"]
    table = _run("-r", "cuda_gpu_kern_sum", "-f", "table")
    assert f"{int(top['Total Time (ns)']):,}" in table


def test_one_report_on_stdout_is_exactly_that_document():
    assert _run("-r", "cuda_gpu_kern_sum", "-f", "csv") == GOLDEN.read_text()
    rows = list(csv.DictReader(io.StringIO(_run("-r", "cuda_api_sum", "-f", "csv"))))
    assert rows and set(rows[0]) >= {"Name", "Num Calls", "Total Time (ns)"}


def test_several_reports_json_is_one_object_keyed_by_report_csv_is_refused():
    doc = json.loads(_run("-f", "json"))
    assert list(doc) == [
        "nvtx_sum",
        "osrt_sum",
        "cuda_api_sum",
        "cuda_gpu_kern_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
    ]
    golden = list(csv.DictReader(io.StringIO(GOLDEN.read_text())))
    assert [r["Name"] for r in doc["cuda_gpu_kern_sum"]] == [r["Name"] for r in golden]
    for fmt in ("csv", "tsv"):
        err = _run("-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", fmt, code=2)
        assert err.count("\n") == 1 and "-o PREFIX" in err and "-f json" in err
    md = _run("-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "md").splitlines()
    assert md[0] == "### CUDA GPU Kernel Summary (cuda\\_gpu\\_kern\\_sum)" and md[2].startswith("| Time (%) |")
    assert "### CUDA API Summary (cuda\\_api\\_sum)" in md


def test_multi_table_commands_json_one_object_csv_refused():
    doc = json.loads(_run("-f", "json", cmd="overview"))
    assert {"Trace", "Time by category", "Findings"} <= set(doc)
    err = _run("-f", "csv", cmd="overview", code=2)
    assert err.count("\n") == 1 and "-f json" in err


def test_a_report_without_data_writes_nothing_and_says_so(tmp_path):
    from conftest import KINETO

    cpu = KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    r = kview_here("stats", str(cpu), "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", str(tmp_path / "run"))
    assert r.returncode == 0 and list(tmp_path.iterdir()) == []
    assert "skipped cuda_gpu_kern_sum (does not contain CUDA kernel data); no file written for it" in r.stderr
    assert _run("-r", "cuda_gpu_kern_sum", "-f", "csv", trace=cpu) == ""
    assert json.loads(_run("-r", "cuda_gpu_kern_sum", "-f", "json", trace=cpu)) == []
