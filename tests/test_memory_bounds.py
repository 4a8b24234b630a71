"""Memory stays bounded: a gzip'd JSON is inflated only up to what the memory budget allows
(`--max-memory`, KVIEW_MAX_MEMORY, else the memory available), so a 4 MB bomb that inflates to
4 GiB is refused in one line and small (how fast: bench, not a test)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zlib

import pytest

from kview.io import memory_budget

from conftest import SAMPLES, run_kview_measured

JSON_GZ = SAMPLES / "lm-small_ctx256_forward_torch.json.gz"


def _member(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)  # one gzip member
    return c.compress(data) + c.flush()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> str:
    """~4 MB of gzip that inflates to 4 GiB of (valid so far) JSON: 64 members of 64 MiB of
    spaces between an opening and a closing member, so no trailer tells the size."""
    p = tmp_path_factory.mktemp("bomb") / "bomb.json.gz"
    spaces = _member(b" " * (64 << 20))
    with open(p, "wb") as f:
        f.write(_member(b'{"traceEvents": ['))
        for _ in range(64):
            f.write(spaces)
        f.write(_member(b"]}"))
    assert p.stat().st_size < 5_000_000
    return str(p)


def run_measured(args, env=None):
    """(exit status, stderr, seconds, peak RSS in MiB) of `kview ARGS` in a child."""
    rc, _, err, seconds, rss = run_kview_measured(args, env)
    return rc, err, seconds, rss


@pytest.mark.parametrize("how", ["flag", "env"])
def test_gzip_bomb_is_refused_in_one_line_and_small(bomb, how):
    args = ["stats", bomb, "--no-cache"] + (["--max-memory", "1G"] if how == "flag" else [])
    rc, err, _, rss = run_measured(args, env={"KVIEW_MAX_MEMORY": "1G"} if how == "env" else None)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    source = "--max-memory 1.0 GiB" if how == "flag" else "KVIEW_MAX_MEMORY=1.0 GiB"
    assert lines[0] == (
        f"kview: {bomb}: inflates to more than 256.0 MiB of JSON, more than kview can decode within "
        f"{source}; give --max-memory SIZE (or set KVIEW_MAX_MEMORY) to allow more"
    )
    assert rss < 900, f"peak RSS {rss:.0f} MiB"  # 256 MiB of text, not 4 GiB (its time: bench, not here)


def test_tui_refuses_the_bomb_before_starting(bomb):
    rc, err, _, rss = run_measured([bomb, "--max-memory", "1G"])
    assert rc == 2 and "inflates to more than 256.0 MiB of JSON" in err and len(err.strip().splitlines()) == 1
    assert rss < 900


def test_gzip_trailer_refuses_without_inflating(tmp_path):
    """A single member's trailer holds its length: over the bound, refused before inflating (here
    the deflate data is garbage, which inflating would report instead)."""
    good = _member(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}")
    p = tmp_path / "t.json.gz"
    p.write_bytes(good[:10] + bytes(len(good) - 18) + good[-8:])
    rc, err, _, _ = run_measured(["stats", p, "--no-cache"], env={"KVIEW_MAX_MEMORY": "64M"})
    assert rc == 2 and "inflates to more than 16.0 MiB of JSON" in err
    rc, err, _, _ = run_measured(["stats", p, "--no-cache", "--max-memory", "1G"])
    assert rc == 2 and "cannot be read as trace JSON" in err  # now it is inflated, and is garbage


def test_budget_can_be_raised_for_a_real_trace(tmp_path):
    text = gzip.decompress(JSON_GZ.read_bytes())
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    small = {"KVIEW_MAX_MEMORY": str(len(text) * 4 // 2)}  # half of what this trace needs
    for p in (JSON_GZ, plain):
        rc, err, _, _ = run_measured(["stats", p, "--no-cache"], env=small)
        assert rc == 2 and f"kview: {p}: inflates to more than" in err and "KVIEW_MAX_MEMORY" in err
        rc, err, _, _ = run_measured(["stats", p, "--no-cache", "--max-memory", str(len(text) * 4 + 1)], env=small)
        assert rc == 0, err  # the flag overrides the environment


def test_default_budget_is_the_memory_available(monkeypatch):
    monkeypatch.delenv("KVIEW_MAX_MEMORY", raising=False)
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    avail = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable:"))
    limit, why = memory_budget.json_text_limit()
    assert why == "the memory available"
    assert limit * 4 <= 1.2 * avail
    if memory_budget.cgroup_room() is None and memory_budget.address_space_room() is None:
        assert abs(limit * 4 - avail) < 0.2 * avail


def test_an_address_space_limit_bounds_the_budget():
    """Under `ulimit -v` the budget is what the limit leaves, not the host's free memory: a
    process given 512 MiB beyond the address space it holds has at most that."""
    code = (
        "import resource\n"
        "held = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (held + (512 << 20), hard))\n"
        "from kview.io import memory_budget\n"
        "print(memory_budget.available(), memory_budget.system_available())\n"
    )
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    got, system = map(int, out.split())
    assert 0 < got <= 512 << 20 < system  # the import's own mappings come out of the 512 MiB


def _write(folder, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_a_memory_cgroup_bounds_the_budget(tmp_path):
    """A container's or batch job's memory cgroup: its limit less its usage, the file cache it
    may drop given back, the tightest of the cgroup and those above it; none without a limit.
    The files as the kernel writes them, v2 and v1."""
    v2 = tmp_path / "v2"
    _write(v2, {"memory.max": "max\n"})
    _write(
        v2 / "job",
        {
            "memory.max": "2147483648\n",
            "memory.current": "1073741824\n",
            "memory.stat": "anon 805306368\nfile 268435456\ninactive_file 268435456\n",
        },
    )
    _write(v2 / "job" / "step", {"memory.max": "max\n", "memory.current": "1000000000\n"})
    (tmp_path / "in_v2").write_text("0::/job/step\n")
    assert memory_budget.cgroup_room(v2, tmp_path / "in_v2") == (2 << 30) - (1 << 30) + (256 << 20)

    v1 = tmp_path / "v1"
    _write(
        v1 / "memory",
        {
            "memory.limit_in_bytes": "3221225472\n",
            "memory.usage_in_bytes": "1073741824\n",
            "memory.stat": "cache 0\ntotal_inactive_file 0\n",
        },
    )
    _write(v1 / "memory" / "a", {"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "5\n"})
    (tmp_path / "in_v1").write_text("5:devices:/a\n4:memory:/a\n0::/\n")
    assert memory_budget.cgroup_room(v1, tmp_path / "in_v1") == 2 << 30

    (tmp_path / "free").write_text("4:memory:/a\n")
    _write(v1 / "memory", {"memory.limit_in_bytes": "9223372036854771712\n"})
    assert memory_budget.cgroup_room(v1, tmp_path / "free") is None


def test_a_budget_given_to_one_command_goes_with_it(monkeypatch, capsys):
    """main() may run several commands in one process (a caller in Python, the tests): a
    --max-memory given to one is that command's, not the budget of what runs after it."""
    from kview.cli import main

    monkeypatch.delenv("KVIEW_MAX_MEMORY", raising=False)
    assert main(["stats", str(JSON_GZ), "--max-memory", "4M", "--no-cache"]) == 2  # it held in the command
    assert "--max-memory 4.0 MiB" in capsys.readouterr().err
    assert memory_budget.budget()[1] == "the memory available"
    assert main(["stats", str(JSON_GZ), "--no-cache"]) == 0
    capsys.readouterr()
    assert memory_budget.budget()[1] == "the memory available"


def test_bad_max_memory_is_a_usage_error():
    rc, err, _, _ = run_measured(["stats", JSON_GZ, "--max-memory", "lots"])
    assert rc == 2 and err.strip() == "kview: --max-memory: cannot read memory size 'lots' (e.g. 8G, 512M)"
