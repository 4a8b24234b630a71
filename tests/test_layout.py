"""Architecture rules: the core never imports Textual or torch, and only kview.* is installed."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile

from conftest import ROOT

FORBIDDEN_IN_CORE = ("textual", "torch", "kview.tui", "kview.capture", "kview.models", "nvtx", "pyperclip")


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_core_modules_import_neither_tui_nor_capture_nor_torch():
    offenders = []
    core = ROOT / "kview"
    for py in core.rglob("*.py"):
        for name in _imports(py):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_CORE):
                offenders.append(f"{py.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_stats_command_does_not_load_textual_or_torch():
    code = (
        "import sys; from kview.cli import main; "
        f"main(['stats', r'{ROOT / 'sample_traces' / 'lm-small_ctx256_forward_nsys.sqlite'}', '-r', 'cuda_gpu_kern_sum']); "
        "bad = [m for m in ('textual', 'torch') if m in sys.modules]; print('LOADED', bad)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in r.stdout, r.stdout[-500:] + r.stderr


def test_help_and_a_small_kernel_summary_load_no_table_library():
    """`kview --help` and a command's --help are argparse only (`kview --help` builds no command's
    parser, a command's --help builds that command's alone), and a small trace's kernel summary
    is answered from SQLite (kview.quick_stats): no polars, numpy or columnar reader. A large
    trace's (the same trace read as one) loads polars and connectorx, but neither pyarrow nor numpy."""
    small = ROOT / "sample_traces" / "lm-small_ctx256_forward_nsys.sqlite"
    tables = "('polars', 'numpy', 'pyarrow', 'connectorx')"
    code = (
        "import sys, contextlib, io; from kview.cli import main, _SUBPARSERS; from kview import quick_stats\n"
        "def run(argv):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try: main(argv)\n"
        "        except SystemExit: pass\n"
        "    return out.getvalue()\n"
        "for argv in (['--help'], ['stats', '--help'], ['kernels', '--help']):\n"
        "    run(argv)\n"
        "    print('BUILT', argv[0], sorted(_SUBPARSERS))\n"
        f"summary = ['stats', r'{small}', '-r', 'cuda_gpu_kern_sum', '--no-cache']\n"
        "doc = run(summary)\n"
        f"print('LOADED', [m for m in {tables} if m in sys.modules])\n"
        "quick_stats.QUICK_ROWS = 10\n"
        "print('SAME', run(summary) == doc and 'Time (%)' in doc)\n"
        f"print('LARGE', [m for m in {tables} if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in r.stdout, r.stdout[-500:] + r.stderr
    built = [line for line in r.stdout.splitlines() if line.startswith("BUILT")]
    assert built == ["BUILT --help []", "BUILT stats ['stats']", "BUILT kernels ['kernels', 'stats']"], r.stdout
    assert "SAME True" in r.stdout and "LARGE ['polars', 'connectorx']" in r.stdout, r.stdout[-500:] + r.stderr


def test_wheel_installs_only_kview_packages_and_core_needs_no_torch(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(tmp_path.glob("kview-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/")[0] for n in names}
    # .data holds the bundled sample trace, installed under share/kview, not in site-packages
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"kview"}
    assert any(n.endswith("data/share/kview/sample_traces/lm-small_ctx256_train_nsys.sqlite") for n in names)
    # the TUI's stylesheet is package data: the app cannot start without it
    for sub in (
        "kview/tui/__init__.py",
        "kview/tui/kview.tcss",
        "kview/capture/workload.py",
        "kview/models/transformer_lm.py",
    ):
        assert sub in names
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert core and not any(x in line for line in core for x in ("torch", "nvtx"))
    # plain `pip install kview` is complete for every viewing command, the explorer included
    assert all(any(f"Requires-Dist: {d}" in line for line in core) for d in ("pyarrow", "textual", "connectorx"))
    assert "License-Expression: MIT" in meta  # an SPDX string, not the deprecated TOML table


# Declared but never imported by name, needed all the same.
INDIRECT = {
    "pyarrow": "connectorx hands SQLite columns to polars as Arrow tables through it",
    "pytest-asyncio": "runs the async TUI tests (asyncio_mode = auto)",
    "pytest-textual-snapshot": "the snap_compare fixture of the snapshot tests",
    "pytest-xdist": "runs the tests one worker per core (-n auto in addopts)",
    "ruff": ".ci/run lints and format-checks the tree with it",
    "mypy": ".ci/typecheck type-checks the package with it",
    "HolisticTraceAnalysis": "its package is `hta`: test_launches compares kview's launch analysis with it",
}


def test_every_declared_dependency_is_imported():
    import re

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + [d for extra in project["optional-dependencies"].values() for d in extra]
    used = set()
    for folder in ("kview", "tui", "capture", "models", "tests", "bench"):
        for py in (ROOT / folder).rglob("*.py"):
            used |= {n.split(".")[0] for n in _imports(py)}
    unused = []
    for dep in declared:
        dist = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]
        if dist not in INDIRECT and dist.replace("-", "_") not in used:
            unused.append(dist)
    assert unused == []


def test_every_package_folder_is_installed():
    """pyproject lists the packages (the package-dir mapping needs the list): a new folder of the
    core, the explorer or capture that is left out would be missing from every non-editable install."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    mapping = tool["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *rel)))
    assert found == listed
