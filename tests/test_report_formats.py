"""Every format renders what it claims: Markdown that a CommonMark renderer shows as the very
text (no inline HTML, no emphasis), JSON and CSV that carry data (numbers, booleans, missing
values; a header even without rows), and `-o PATH` in the format its extension names."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import polars as pl
import pytest
from markdown_it import MarkdownIt

from kview.cli import main
from kview.output import render

from conftest import FIXTURES, LM_TRACES

SAMPLE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")
MEMORY = FIXTURES / "memory" / "small_train_fp32.memory.pickle.xz"


def _run(capsys, *argv: str, code: int = 0) -> str:
    assert main(list(argv)) == code
    out, err = capsys.readouterr()
    return out if code == 0 else err


def _walk(tokens):
    for t in tokens:
        yield t
        if t.children:
            yield from _walk(t.children)


def markdown_tables(text: str) -> list[list[list[str]]]:
    """The tables of a Markdown document as a CommonMark (+ GFM tables) renderer reads them:
    each cell as the text it shows. Fails on any token that is not plain text."""
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    tables: list[list[list[str]]] = []
    row: list[str] = []
    for t in tokens:
        if t.type == "table_open":
            tables.append([])
        elif t.type == "tr_open":
            row = []
        elif t.type == "tr_close":
            tables[-1].append(row)
        elif t.type == "inline" and tables and t.map is not None:
            kinds = {c.type for c in t.children or []}
            assert kinds <= {"text", "softbreak"}, f"markup in {t.content[:80]!r}: {kinds}"
            row.append("".join(c.content for c in t.children or []))
    assert not [t for t in _walk(tokens) if "html" in t.type]
    return tables


def test_markdown_of_the_kernel_table_reads_back_as_the_full_names(capsys):
    text = _run(capsys, "kernels", str(SAMPLE), "-f", "md")
    (table,) = markdown_tables(text)
    head, rows = table[0], table[1:]
    kernel = head.index("Kernel")
    with sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True) as db:
        names = {
            n
            for (n,) in db.execute(
                "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
            )
        }
    shown = {r[kernel] for r in rows}
    assert names <= shown  # every kernel's full name, `<float>` and `*` and `_` included
    assert any("<" in n and "*" in n for n in names)


def test_markdown_escapes_every_character_commonmark_reads():
    odd = "a<b>c|d*e*_f_`g`\\h~~i~~&amp;[x](y)\nz"
    frame = pl.DataFrame({"Name <T>": [odd], "n": [1]})
    (table,) = markdown_tables(render.to_markdown(frame))
    assert table[0] == ["Name <T>", "n"]
    assert table[1] == [odd.replace("\n", " "), "1"]
    assert render.md_escape("x_<y>") == "x\\_\\<y\\>"


def test_json_carries_numbers_booleans_and_missing_values(capsys):
    rows = json.loads(_run(capsys, "kernels", str(SAMPLE), "-f", "json"))
    table = _run(capsys, "kernels", str(SAMPLE), "-f", "tsv")
    assert len(rows) == table.count("\n") - 1
    assert {type(r["TC"]) for r in rows} == {bool, type(None)}
    assert all(isinstance(r["Duration (ns)"], int) and isinstance(r["Idx"], int) for r in rows)
    assert not [k for r in rows for k, v in r.items() if v == "-"]
    no_layer = [r for r in rows if r["Layer"] is None]
    assert no_layer and all(r["Layer"] is None for r in no_layer)
    # the same rows missing a layer are the ones the TSV leaves empty
    tsv = list(csv.DictReader(io.StringIO(table), delimiter="\t"))
    assert sum(1 for r in tsv if r["Layer"] == "") == len(no_layer)
    with sqlite3.connect(f"file:{SAMPLE}?mode=ro", uri=True) as db:
        (kernels,) = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert sum(1 for r in rows if r["Grid"] is not None) == kernels  # copies have no launch dimensions


def test_a_csv_without_rows_still_has_its_header(capsys, tmp_path):
    text = _run(capsys, "kernels", str(SAMPLE), "--filter", "kernel:no_such_kernel_anywhere", "-f", "csv")
    frame = pl.read_csv(io.StringIO(text))
    assert frame.height == 0 and frame.columns[:3] == ["Idx", "Direction", "Layer"]
    assert render.to_csv(pl.DataFrame(schema={"a": pl.Int64, "b": pl.String})) == "a,b\n"
    assert render.to_tsv(pl.DataFrame(schema={"a": pl.Int64, "b": pl.String})) == "a\tb\n"


def test_output_format_follows_the_extension_unless_f_says(capsys, tmp_path):
    for ext, check in (
        ("csv", lambda t: pl.read_csv(io.StringIO(t)).height > 0),
        ("json", lambda t: isinstance(json.loads(t), list)),
        ("md", lambda t: t.startswith("| Idx |")),
        ("tsv", lambda t: t.startswith("Idx\tDirection")),
        ("txt", lambda t: t.startswith("  Idx  ")),
    ):
        out = tmp_path / f"k.{ext}"
        _run(capsys, "kernels", str(SAMPLE), "-o", str(out))
        assert check(out.read_text()), ext
    out = tmp_path / "k2.csv"
    _run(capsys, "kernels", str(SAMPLE), "-o", str(out), "-f", "json")
    assert isinstance(json.loads(out.read_text()), list)


def test_memory_summary_as_data_has_units_in_its_column_names(capsys):
    rows = json.loads(_run(capsys, "memory", str(MEMORY), "--table", "summary", "-f", "json"))
    (row,) = rows
    assert isinstance(row["Peak allocated (B)"], int) and isinstance(row["Events"], int)
    assert isinstance(row["Span (ms)"], float)
    text = _run(capsys, "memory", str(MEMORY), "--table", "summary", "-f", "table")
    assert f"({row['Peak allocated (B)']:,} B)" in text  # the person's table says the same bytes
    data = pl.read_csv(io.StringIO(_run(capsys, "memory", str(MEMORY), "--table", "summary", "-f", "csv")))
    assert data["Peak allocated (B)"].dtype == pl.Int64
    assert not [c for c in data.columns if data.schema[c] == pl.String and data[c].str.contains(r" B\)$").any()]


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_every_multi_table_document_parses(capsys, fmt):
    text = _run(capsys, "overview", str(SAMPLE), "-f", fmt)
    if fmt == "md":
        assert len(markdown_tables(text)) >= 5
    else:
        doc = json.loads(text)
        assert all(v != "-" for rows in doc.values() for r in rows for v in r.values())


# -- terminal tables fit the terminal ---------------------------------------------------------------
B200 = FIXTURES / "kineto" / "traces__b200__eager_trace.json.gz"
WIDTHS = (80, 120, 200)


def _at(capsys, monkeypatch, width: int, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    return _run(capsys, *argv)


def _rows_below_rule(text: str) -> list[str]:
    lines = text.splitlines()
    rule = next(i for i, x in enumerate(lines) if x and set(x) <= {"-", " "})
    return lines[rule + 1 :]


@pytest.mark.parametrize("trace", [SAMPLE, B200], ids=["sample", "b200"])
def test_the_kernel_table_fits_80_120_200_columns_and_keeps_each_name_s_start(capsys, monkeypatch, trace):
    rows = json.loads(_run(capsys, "kernels", str(trace), "-f", "json"))
    for width in WIDTHS:
        text = _at(capsys, monkeypatch, width, "kernels", str(trace))
        assert max(len(x) for x in text.splitlines()) <= width, width
        lines = _rows_below_rule(text)
        shown = lines[: len(rows)]
        assert len(shown) == len(rows)
        # numbers are whole: every row's duration, grouped as the table writes it
        assert all(f"{r['Duration (ns)']:,}" in line for r, line in zip(rows, shown))
        if width == 200:  # each kernel's name keeps at least its first 40 characters
            assert all(r["Kernel"][:40] in line for r, line in zip(rows, shown))
    # piped (no COLUMNS, no terminal) the table is not cut at all
    monkeypatch.delenv("COLUMNS")
    whole = _run(capsys, "kernels", str(trace))
    assert all(r["Kernel"] in line for r, line in zip(rows, _rows_below_rule(whole)))


@pytest.mark.parametrize("trace", [SAMPLE, B200], ids=["sample", "b200"])
def test_every_command_s_table_fits_the_terminal(capsys, monkeypatch, trace):
    commands = [
        ["stats"],
        ["overview"],
        ["phases"],
        ["layers"],
        ["compare"],
        ["timeline"],
        ["diff", str(trace)],
        ["launches"],
        ["critical-path"],
        ["efficiency"],
        ["iterations"],
    ]
    for width in WIDTHS:
        for cmd in commands if width == 80 else commands[:2]:
            monkeypatch.setenv("COLUMNS", str(width))
            main([cmd[0], str(trace), *cmd[1:]])
            text = capsys.readouterr().out
            assert text and max(len(x) for x in text.splitlines()) <= width, (width, cmd)


def test_headers_wrap_between_words_never_inside_one():
    frame = pl.DataFrame({"Total Time (ns)": [1234], "Name": ["x" * 200]})
    lines = render.to_table(frame, width=33).splitlines()
    assert [x.split()[0] for x in lines[:3]] == ["Total", "Time", "(ns)"] and lines[2].split()[1] == "Name"
    assert max(len(x) for x in lines) <= 33 and lines[4].split()[0] == "1,234"
    # with room, a header stays on one line before text columns take the rest
    assert render.to_table(frame, width=60).splitlines()[0].split() == ["Total", "Time", "(ns)", "Name"]
    assert render.to_table(frame, width=0).splitlines()[0].split() == ["Total", "Time", "(ns)", "Name"]


def test_timeline_ticks_differ_at_any_zoom(capsys):
    from kview.analysis.timeline import axis

    for t0, t1 in ((116_400_000, 116_402_000), (116_400_000, 116_400_050), (0, 3_000_000_000), (5_000, 9_000)):
        labels, _ = axis(t0, t1, 100)
        ticks = labels.split("  ")
        ticks = [t.strip() for t in ticks if t.strip()]
        assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), (t0, t1, ticks)
