"""The document writers (kview.output.render): what each format holds, cell for cell, on the LM
sample's attributed table and on cells with the characters each format has to treat."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys
import threading

import polars as pl
import pytest

from kview.analysis.attribution import attribute, shown
from kview.output import render
from kview.trace import open_trace

from conftest import LM_TRACES

TRACE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")

# cells each format has to treat: separator, quote, line break, carriage return, tab, pipe,
# backslash, empty text and NULL
ODD = pl.DataFrame(
    {
        "Name": ["a, b", 'say "hi"', 'f("x", 1)', "two\nlines", "cr\rhere", "tab\there", "a|b\\c", "", None],
        "Count": [1, 2, 3, 4, 5, 6, 7, 8, None],
        "Avg (ns)": [0.5, 1e16, float("nan"), float("inf"), 2.0, None, 1 / 3, -0.0, 12.25],
    }
)


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return shown(attribute(open_trace(TRACE)))


def _doc(frame: pl.DataFrame, fmt: str) -> str:
    return render.render(frame, fmt)


def _texts(frame: pl.DataFrame, missing: str = "-") -> list[list[str]]:
    """Every cell as the CSV holds it: NULL and kview's `-` (missing) as empty, numbers as
    polars prints them."""
    return [
        ["" if v is None or v == missing else v for v in row]
        for row in frame.select(pl.all().cast(pl.String)).iter_rows()
    ]


def test_csv_of_the_lm_table_reads_back_cell_for_cell(table):
    text = _doc(table, "csv")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == table.columns and len(rows) == table.height + 1 == 3118
    assert rows[1:] == _texts(table)
    # a kernel name with commas is one quoted cell; the quoting is nsys's (only what needs it)
    line = text.splitlines()[2]
    assert line.startswith("2,fprop,layer_0:attention_sublayer,pow,") and line.count('"') % 2 == 0
    assert ',"-",' not in text and ',"",' not in text


def test_csv_quotes_only_cells_with_the_separator_or_a_line_break():
    text = _doc(ODD, "csv")
    assert text.splitlines()[:4] == [
        "Name,Count,Avg (ns)",
        '"a, b",1,0.5',
        'say "hi",2,1e+16',  # a quote alone stays as it is, as nsys leaves it
        '"f(""x"", 1)",3,NaN',  # quoted for the comma: its quotes doubled
    ]
    # a carriage return alone is not quoted either; it is shown as `\x0d`, as every control
    # character a terminal would act on (kview.output.visible)
    assert '\n"two\nlines",4,inf\ncr\\x0dhere,5,2.0\n' in text
    assert text.endswith("\n,8,-0.0\n,,12.25\n")  # empty text and NULL are both empty cells
    rows = list(csv.reader(io.StringIO(text, newline="")))
    names = ["a, b", 'say "hi"', 'f("x", 1)', "two\nlines", "cr\\x0dhere", "tab\there", "a|b\\c", "", ""]
    assert [r[0] for r in rows[1:]] == names


def test_csv_without_quotes_anywhere_is_polars_minimal_quoting():
    frame = ODD.filter(~pl.col("Name").str.contains_any(['"', "\r"]).fill_null(False))
    assert _doc(frame, "csv") == (
        'Name,Count,Avg (ns)\n"a, b",1,0.5\n"two\nlines",4,inf\ntab\there,6,\na|b\\c,7,0.3333333333333333\n'
        ",8,-0.0\n,,12.25\n"
    )


def test_tsv_turns_tabs_in_cells_into_spaces_and_quotes_nothing():
    lines = _doc(ODD, "tsv").split("\n")
    assert lines[0] == "Name\tCount\tAvg (ns)"
    assert lines[1:3] == ["a, b\t1\t0.5", 'say "hi"\t2\t1e+16']
    assert "tab here\t6\t" in lines and "\t\t12.25" in lines


def test_markdown_escapes_pipes_backslashes_and_line_breaks(table):
    lines = _doc(ODD, "md").split("\n")[:-1]
    assert lines[:2] == ["| Name | Count | Avg (ns) |", "|---|---:|---:|"]
    assert lines[5:7] == ["| two lines | 4 | inf |", "| cr here | 5 | 2.0 |"]
    assert lines[8] == "| a\\|b\\\\c | 7 | 0.3333333333333333 |"
    assert lines[9:] == ["|  | 8 | -0.0 |", "|  |  | 12.25 |"]
    md = _doc(table, "md").splitlines()
    assert len(md) == table.height + 2
    assert md[3] == "| " + " | ".join(render.md_escape(c) for c in _texts(table, missing="")[1]) + " |"


def test_json_parses_to_the_frame_records(table):
    rows = json.loads(_doc(table, "json"))
    expected = [
        {k: None if (isinstance(v, float) and math.isnan(v)) or v == "-" else v for k, v in r.items()}
        for r in table.to_dicts()
    ]
    assert rows == expected
    odd = json.loads(_doc(ODD, "json"))
    assert [r["Name"] for r in odd] == ODD["Name"].to_list()
    assert [r["Avg (ns)"] for r in odd][:4] == [0.5, 1e16, None, None]  # NaN and infinity: null
    assert _doc(ODD.clear(), "json") == "[]\n"
    assert json.loads(render.render_sections({"a": ODD, "b": ODD.clear()}, "json")) == {"a": odd, "b": []}


@pytest.mark.parametrize("fmt", ["csv", "tsv", "md", "json"])
def test_a_pipe_closed_by_its_reader_is_python_broken_pipe_error(table, fmt):
    r, w = os.pipe()

    def reader():  # takes the first 100 kB, then goes away (as `head` does)
        with open(r, "rb") as f:
            f.read(100_000)

    t = threading.Thread(target=reader)
    t.start()
    out = open(w, "wb", buffering=0)
    try:
        with pytest.raises(BrokenPipeError):
            render.write(pl.concat([table] * 8), fmt, out)  # 35 MB
    finally:
        t.join()
        out.close()


def test_kernels_into_head_ends_quietly():
    cmd = f"{sys.executable} -m kview.cli kernels {TRACE} -f csv | head -2"
    r = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines()[0].startswith("Idx,Direction,Layer,Op,Params,Kernel")


def test_enum_columns_are_written_by_their_names_with_each_format_rules():
    style = pl.Series(["Push,Pop", "tab\tbar|", None, "Push,Pop"], dtype=pl.Enum(["Push,Pop", "tab\tbar|", "unused"]))
    frame = pl.DataFrame({"Style": style, "N": [1, 2, 3, 4]})
    assert _doc(frame, "csv") == 'Style,N\n"Push,Pop",1\ntab\tbar|,2\n,3\n"Push,Pop",4\n'
    assert _doc(frame, "tsv") == "Style\tN\nPush,Pop\t1\ntab bar|\t2\n\t3\nPush,Pop\t4\n"
    assert _doc(frame, "md").splitlines()[2:4] == ["| Push,Pop | 1 |", "| tab\tbar\\| | 2 |"]
    assert json.loads(_doc(frame, "json"))[1] == {"Style": "tab\tbar|", "N": 2}
    quoted = pl.DataFrame({"Style": pl.Series(['a "b"', "c,d"], dtype=pl.Enum(['a "b"', "c,d"]))})
    assert _doc(quoted, "csv") == 'Style\na "b"\n"c,d"\n'


# what a large table's text may hold that a format treats: ODD's names, and control characters
# (ESC, a C1 CSI, DEL) short enough to lie inside their views and long enough to lie in a buffer
TREATED = [n for n in ODD["Name"].to_list() if n] + ["\x1b[2J", "c1\x9b", "del\x7f", "a long name, then \x9b"]


def _large(table: pl.DataFrame, odd: str | None) -> pl.DataFrame:
    """The LM table's kernel names, each made distinct by its row (20,000 rows), one row holding
    `odd`, the rows gathered out of the order their text was made in (as a report sorted by its
    totals)."""
    names = table["Kernel"]
    n = 20_000
    text = pl.DataFrame({"i": range(n)}).select(
        pl.format("{} #{}", names.gather(pl.int_range(n) % names.len()), pl.col("i")).alias("Kernel")
    )["Kernel"]
    if odd is not None:
        text = text.scatter(12_345, odd)
    order = pl.Series(range(n)).hash(7).arg_sort()
    return pl.DataFrame(
        {"Kernel": text.gather(order), "Short": pl.Series([f"k{i % 97}" for i in range(n)]), "n": order}
    )


@pytest.mark.parametrize("fmt", ["csv", "tsv", "md", "table", "json"])
def test_a_large_tables_text_read_where_it_lies_writes_the_same_bytes(table, fmt, monkeypatch):
    """Text columns of text_bytes.MIN_ROWS rows or more are tested for what each format treats in
    their buffers' memory order and written a slice at a time with their bytes copied in row order:
    the same document as the values tested one by one and written as they lie, whatever
    character a value holds, inline or in a buffer, and for a slice of rows whose buffers hold
    a character no row of it does."""
    from kview.output import text_bytes

    # a table large enough to be read this way, at a test's size
    monkeypatch.setattr(text_bytes, "MIN_ROWS", 10_000)
    monkeypatch.setattr(text_bytes, "CACHED", 0)
    monkeypatch.setattr(render, "BATCH_ROWS", 6_000)
    # the values holding what this format treats (text_bytes' own test below looks at each)
    treated = {
        "csv": ["a, b", 'say "hi"', "two\nlines", "cr\rhere"],
        "tsv": ["tab\there"],
        "md": ["a|b\\c", "two\nlines"],
        "table": [],
        "json": ['say "hi"', "two\nlines", "a long name in \u00b5s"],  # escaped; C1's lead byte, no C1
    }[fmt] + ["\x1b[2J", "a long name, then \x9b"]
    frames = [_large(table, None)] + [_large(table, odd) for odd in treated]
    frames.append(_large(table, "\x1b[2J").filter(pl.col("Kernel") != "\x1b[2J"))
    assert text_bytes.scattered(frames[0]["Kernel"]) and not text_bytes.scattered(frames[0]["Short"])
    for frame in frames:
        fast = render.render(frame, fmt)
        with monkeypatch.context() as m:
            m.setattr(text_bytes, "MIN_ROWS", 1 << 62)
            assert render.render(frame, fmt) == fast


def test_text_bytes_finds_each_character_inline_or_in_a_buffer(table, monkeypatch):
    from kview.output import text_bytes
    from kview.output.visible import IN_LINES_ASCII

    monkeypatch.setattr(text_bytes, "MIN_ROWS", 10_000)

    plain = _large(table, None)["Kernel"]
    assert text_bytes.lacks(plain, IN_LINES_ASCII, c1=True) and text_bytes.lacks(plain, '"\r\t')
    assert not text_bytes.lacks(plain, ",")  # the LM kernel names hold commas
    for odd in TREATED:
        texts = _large(table, odd)["Kernel"]
        holds = {c for c in '"\r\t\n|\\' if c in odd}
        for c in holds:
            assert not text_bytes.lacks(texts, c), (odd, c)
        controls = any(ord(c) < 0x20 and c not in "\t\n" or 0x7F <= ord(c) <= 0x9F for c in odd)
        assert text_bytes.lacks(texts, IN_LINES_ASCII, c1=True) == (not controls), odd
        # several sets of characters at once answer as each alone (a writer's one look)
        sets = [(IN_LINES_ASCII, True), ('"\r', False), ("\t", False), ("|\\", False)]
        assert text_bytes.lacks_each(texts, sets) == [text_bytes.lacks(texts, c, c1=c1) for c, c1 in sets], odd
    # a column of a few texts over every row (the LM table's kernel names, repeated) is answered
    # from its distinct texts: as exactly, wherever the row holding the character lies
    names = table["Kernel"].gather(pl.int_range(20_000, eager=True) % table.height)
    assert text_bytes.repeats(names)
    assert text_bytes.lacks(names, IN_LINES_ASCII, c1=True) and text_bytes.lacks(names, '"\r\t')
    assert not text_bytes.lacks(names, ",")
    for odd in TREATED:
        texts = names.scatter(12_345, odd)
        for c in {c for c in '"\r\t\n|\\' if c in odd}:
            assert not text_bytes.lacks(texts, c), (odd, c)
        controls = any(ord(c) < 0x20 and c not in "\t\n" or 0x7F <= ord(c) <= 0x9F for c in odd)
        assert text_bytes.lacks(texts, IN_LINES_ASCII, c1=True) == (not controls), odd
        # several sets of characters at once answer as each alone (a writer's one look)
        sets = [(IN_LINES_ASCII, True), ('"\r', False), ("\t", False), ("|\\", False)]
        assert text_bytes.lacks_each(texts, sets) == [text_bytes.lacks(texts, c, c1=c1) for c, c1 in sets], odd
    # a small column is not read this way: "may hold"
    assert not text_bytes.lacks(pl.Series(["gemm"] * 9_999), IN_LINES_ASCII)
    assert text_bytes.scattered(plain) is False  # 1 MB of names: in cache whatever the order


@pytest.mark.parametrize("width", [0, 80, 200])
@pytest.mark.parametrize("frame_of", ["lm", "odd"])
def test_a_large_table_laid_out_by_polars_is_the_small_paths_bytes(table, frame_of, width, monkeypatch):
    """Past TABLE_ROWS a terminal table is laid out by polars a slice at a time: the same bytes
    as table_text's, unfitted and fitted (names cut, columns left out and their note)."""
    frame = table if frame_of == "lm" else ODD.with_columns(pl.col("Name").alias("NVTX Path"))
    docs = {}
    for rows in (0, frame.height):
        monkeypatch.setattr(render, "TABLE_ROWS", rows)
        monkeypatch.setattr(render, "BATCH_ROWS", 7)  # several slices
        buf = io.BytesIO()
        render.write(frame, "table", buf, width=width)
        docs[rows] = buf.getvalue()
    assert docs[0] == docs[frame.height]
    assert docs[0] == render.to_table(frame, width=width).encode()
    if width == 80 and frame_of == "lm":
        assert b"more columns at a wider terminal" in docs[0] and "…".encode() in docs[0]
