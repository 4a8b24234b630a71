"""No byte from a trace, a snapshot or a file name reaches the terminal as a control character:
traces whose kernel names, NVTX text, Kineto event names and snapshot frame file names hold an
OSC 52 clipboard write, a screen clear and BELs, through every output format, stderr and the
explorer's Kernels view. JSON keeps every byte, escaped."""

from __future__ import annotations

import gzip
import json
import lzma
import pickle
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest

from kview.cli import main
from kview.output.render import FORMATS
from kview.output.visible import VisibleStream, json_visible, visible, visible_lines

from conftest import FIXTURES, SAMPLES

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # sets the clipboard to `echo pwned`
ATTACK = OSC52 + "\x1b[2J" + "\x07" + "\x9b" + "\x7f"  # clipboard, clear screen, BEL, C1 CSI, DEL
SHOWN = visible(ATTACK)
# what a terminal acts on: C0 (but the document's own line breaks and tabs), DEL, C1
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LM_FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"


def test_visible_shows_every_control_character_and_keeps_the_rest():
    assert SHOWN == "\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\x07\\x9b\\x7f"
    assert visible("gemm\tA\nB") == "gemm\\x09A\\x0aB"
    assert visible_lines("gemm\tA\nB\r") == "gemm\tA\nB\\x0d"
    assert visible("µs ▏█ 名前") == "µs ▏█ 名前"
    # a document streamed in pieces, a C1 character's two bytes split between two writes
    import io

    out = io.BytesIO()
    s = VisibleStream(out)
    data = ("a" + ATTACK + "\n").encode()
    cut = data.index(b"\xc2") + 1
    s.write(data[:cut])
    s.write(data[cut:])
    s.finish()
    assert out.getvalue().decode() == "a" + SHOWN + "\n"
    assert json.loads(json_visible(json.dumps(ATTACK, ensure_ascii=False).encode())) == ATTACK


@pytest.fixture(scope="module")
def attack_nsys(tmp_path_factory):
    """The LM forward trace with the longest kernel's names and an NVTX range's text attacked,
    under a file name that holds an escape too."""
    folder = tmp_path_factory.mktemp("attack")
    path = folder / "evil\x1b[2J.sqlite"
    shutil.copy(LM_FWD, path)
    con = sqlite3.connect(path)
    top = con.execute(
        "SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName ORDER BY SUM(end - start) DESC LIMIT 1"
    ).fetchone()[0]
    ids = {
        i
        for row in con.execute(
            "SELECT shortName, demangledName, mangledName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = ?", (top,)
        )
        for i in row
        if i is not None
    }
    con.executemany("UPDATE StringIds SET value = value || ? WHERE id = ?", [(ATTACK, i) for i in ids])
    changed = con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE text = 'token_embeddings'", (ATTACK,)).rowcount
    con.commit()
    con.close()
    assert ids and changed
    return path


@pytest.fixture(scope="module")
def attack_kineto(tmp_path_factory):
    """A torch.profiler trace whose kernels, CPU ops and user annotation carry the attack."""
    folder = tmp_path_factory.mktemp("attack_kineto")
    src = FIXTURES / "kineto" / "traces__torch_compile_triton__trace.json.gz"
    data = json.loads(gzip.decompress(src.read_bytes()))
    for e in data["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "user_annotation", "gpu_user_annotation"):
            e["name"] = e["name"] + ATTACK
    path = folder / "evil.json"
    path.write_text(json.dumps(data))
    return path


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _strings(obj) -> list[str]:
    """Every string inside a parsed JSON document."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [k, *_strings(v)]]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _no_control(text: str) -> None:
    found = CONTROL.search(text)
    assert found is None, (
        f"a control character {found.group()!r} reaches the terminal: {text[max(found.start() - 40, 0) : found.end() + 40]!r}"
    )


def _tables_holding_the_attack():
    import polars as pl

    yield "text", pl.DataFrame({"Kernel": ["gemm", ATTACK], "n": [1, 2]})
    yield "enum", pl.DataFrame({"Kernel": pl.Series(["gemm", ATTACK], dtype=pl.Enum(["gemm", ATTACK]))})
    yield "categorical", pl.DataFrame({"Kernel": pl.Series(["gemm", ATTACK], dtype=pl.Categorical)})
    yield "column name", pl.DataFrame({ATTACK: [1, 2]})
    # a column repeating a few texts is looked at once per distinct text: one row of 9,000, outside any sample, holds it
    yield "repeated text", pl.DataFrame({"Kernel": ["gemm"] * 6001 + [ATTACK] + ["gemm"] * 2998})


@pytest.mark.parametrize("fmt", ["csv", "tsv", "md", "table"])
def test_a_table_is_scanned_unless_its_cells_hold_no_control_character(fmt):
    """The writers skip the scan of their output for a table whose cells and names hold no
    control character: each way one can reach a table (a text cell, an Enum's or a
    Categorical's names, a column name) still comes out shown, and a plain table as it is."""
    import io

    import polars as pl

    from kview.output import render

    for what, table in _tables_holding_the_attack():
        buf = io.BytesIO()
        render.write(table, fmt, buf)
        out = buf.getvalue().decode()
        assert CONTROL.search(out) is None, what
        assert "\\x1b]52;c;" in out, what
    plain = pl.DataFrame({"Kernel": ["gemm", "tab\tand é"], "n": [1, 2]})
    fast, scanned = io.BytesIO(), io.BytesIO()
    render.write(plain, fmt, fast)
    shown = VisibleStream(scanned)
    render._write_text(plain, fmt, shown)
    shown.finish()
    assert fast.getvalue() == scanned.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernels_and_stats_in_every_format(attack_nsys, capsys, fmt, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # a terminal table wide enough to show whole names
    for argv in (
        ["kernels", str(attack_nsys), "-f", fmt, "--no-cache"],
        ["stats", str(attack_nsys), "-r", "cuda_gpu_kern_sum", "-f", fmt, "--no-cache"],
        ["stats", str(attack_nsys), "-r", "nvtx_sum", "-f", fmt, "--no-cache"],
    ):
        code, out, err = _run(capsys, argv)
        assert code == 0, err
        _no_control(out)
        _no_control(err)
        if fmt == "json":  # faithful: the names hold the very bytes of the trace
            assert any(v.endswith(ATTACK) for v in _strings(json.loads(out))), argv
            assert "\x7f" not in out and "\x9b" not in out  # JSON may hold them raw; kview escapes them
        else:
            assert SHOWN in out or OSC52 not in out and visible(OSC52) in out, argv


@pytest.mark.parametrize("fmt", ["table", "md", "json"])
def test_overview_and_the_file_name(attack_nsys, capsys, fmt, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, err = _run(capsys, ["overview", str(attack_nsys), "-f", fmt, "--no-cache"])
    assert code == 0, err
    _no_control(out)
    _no_control(err)
    if fmt == "json":
        assert any(ATTACK in v for v in _strings(json.loads(out)))
    else:
        assert visible(OSC52) in out


@pytest.mark.parametrize("fmt", FORMATS)
def test_kineto_names_in_every_format(attack_kineto, capsys, fmt, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, err = _run(capsys, ["kernels", str(attack_kineto), "-f", fmt, "--no-cache"])
    assert code == 0, err
    _no_control(out)
    _no_control(err)
    if fmt == "json":
        assert any(v.endswith(ATTACK) for v in _strings(json.loads(out)))
    else:
        assert visible(OSC52) in out


def test_written_files_hold_no_control_character(attack_nsys, tmp_path, capsys):
    for fmt in FORMATS:
        out = tmp_path / f"k.{fmt}"
        code, _, err = _run(capsys, ["kernels", str(attack_nsys), "-f", fmt, "-o", str(out), "--no-cache"])
        assert code == 0, err
        _no_control(out.read_text())
        _no_control(err)


def test_error_lines_show_a_file_names_escape(tmp_path, capsys):
    bad = tmp_path / f"bad{ATTACK}.sqlite"
    bad.write_text("not a database\n")
    code, out, err = _run(capsys, ["kernels", str(bad)])
    assert code == 2 and out == ""
    _no_control(err)
    assert len(err.splitlines()) == 1 and visible(OSC52) in err


def test_snapshot_frame_file_names(tmp_path, capsys, monkeypatch):
    """A memory snapshot whose call sites' file names carry the attack."""
    monkeypatch.setenv("COLUMNS", "1000")
    data = pickle.loads(lzma.decompress((FIXTURES / "memory" / "tiny_cmd.memory.pickle.xz").read_bytes()))
    n = 0
    for events in data["device_traces"]:
        for e in events:
            for f in e.get("frames") or []:
                if f["filename"].endswith(".py"):  # the site's file name, still a Python file
                    head, _, name = f["filename"].rpartition("/")
                    f["filename"] = f"{head}/{ATTACK}{name}"
                    n += 1
    assert n
    path = tmp_path / "evil.memory.pickle"
    path.write_bytes(pickle.dumps(data))
    for fmt in FORMATS:
        table = [] if fmt in ("table", "md", "json") else ["--table", "by-site"]
        code, out, err = _run(capsys, ["memory", str(path), "-f", fmt, *table])
        assert code == 0, err
        _no_control(out)
        _no_control(err)
        if fmt == "json":
            assert any(ATTACK in v for v in _strings(json.loads(out)))
        else:
            assert visible(OSC52) in out


def test_the_real_binary_writes_no_control_byte(attack_nsys):
    """The bytes the program itself writes (not a test's capture of them)."""
    for fmt in ("table", "csv"):
        r = subprocess.run(
            [sys.executable, "-m", "kview.cli", "kernels", str(attack_nsys), "-f", fmt, "--no-cache"],
            capture_output=True,
            env={**__import__("os").environ, "COLUMNS": "1000"},
        )
        assert r.returncode == 0, r.stderr
        assert re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", r.stdout + r.stderr) is None
        assert visible(OSC52).encode() in r.stdout


async def test_kernels_view_draws_no_control_character(attack_nsys, tmp_path, monkeypatch):
    from test_tui import loaded

    from kview.tui.app import KviewApp

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    app = KviewApp([str(attack_nsys)], use_cache=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await loaded(pilot)

        def drawn() -> str:
            return "\n".join(s.text for strip in app.screen._compositor.render_strips() for s in strip if not s.control)

        _no_control(drawn())  # the Overview, the file name in it
        await pilot.press("2")  # the Kernels view, the attacked kernel first (the longest)
        await pilot.pause()
        assert app.query_one("#tabs").active == "kernels"
        text = drawn()
        _no_control(text)
        assert "\\x1b" in text  # the name is there, its escapes visible
        await pilot.press("enter")  # the kernel's instances, its detail line
        await pilot.pause()
        _no_control(drawn())
        await pilot.press("y")  # a copy holds the visible form
        _no_control(app.clipboard)
        assert visible(OSC52) in app.clipboard
        app.notify(f"a name: {ATTACK}")  # a notification that quotes a name
        await pilot.pause()
        _no_control(drawn())
        for key in "3456789":  # every other view: NVTX tree, layers, compare, timeline, ...
            await pilot.press(key)
            await pilot.pause()
            _no_control(drawn())


def test_a_chrome_trace_export_keeps_the_names_escaped(attack_nsys, tmp_path, capsys):
    out = tmp_path / "window.json"
    code, _, err = _run(capsys, ["export", str(attack_nsys), "-o", str(out), "--no-cache"])
    assert code == 0, err
    raw = out.read_bytes()
    assert re.search(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", raw) is None  # nothing a terminal acts on
    assert any(v.endswith(ATTACK) for v in _strings(json.loads(raw)))  # every byte kept, escaped


@pytest.mark.parametrize("fmt", ["table", "md", "json"])
@pytest.mark.parametrize("command", ["timeline", "phases", "diff", "compare"])
def test_every_document_command(attack_nsys, capsys, fmt, command, monkeypatch):
    """The commands whose documents are drawn as text (the timeline's op names, the ranges of
    phases, diff and compare), and the trace's own name in their titles."""
    monkeypatch.setenv("COLUMNS", "400")
    traces = [str(attack_nsys)] * (2 if command in ("diff", "compare") else 1)
    code, out, err = _run(capsys, [command, *traces, "-f", fmt, "--no-cache"])
    assert code == 0, err
    _no_control(out)
    _no_control(err)
