"""The explorer's Memory view (key 8): a trace with its allocator history beside it, a snapshot
alone, and a trace without one (fixtures: tests/fixtures/memory/README.md)."""

from __future__ import annotations

import lzma

import pytest
from test_tui import explorer, loaded, screen_text

from kview.analysis import memory
from kview.analysis import memory_timeline as mt
from kview.cli import main
from kview.tui.app import KviewApp
from kview.tui.views import shown_by

from conftest import FIXTURES, SAMPLES


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """tiny_train.sqlite with tiny_train.memory.pickle beside it, as `kview capture --memory` wrote them."""
    folder = tmp_path_factory.mktemp("tui-memory")
    for name in ("tiny_train.sqlite", "tiny_train.memory.pickle"):
        (folder / name).write_bytes(lzma.decompress((FIXTURES / "memory" / f"{name}.xz").read_bytes()))
    return folder


def test_memory_is_key_8_and_tabs_follow_the_keys():
    keys = [k for k, _ in shown_by()]
    # distinct, and in the keyboard's order (0 after 9)
    in_order = sorted(set(keys), key="1234567890".index)
    assert dict((c.view_id, k) for k, c in shown_by())["memory"] == "8" and keys == in_order


async def test_memory_view_of_a_trace_with_its_snapshot(capture):
    trace = capture / "tiny_train.sqlite"
    app = KviewApp([str(trace)], use_cache=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("8")
        await pilot.pause()
        assert app.query_one("#tabs").active == "memory"
        tl = memory.open_memory(trace, use_cache=False)
        live = mt.live_at(tl, tl.peak["idx"])
        want = [mt.by_site(live, 50), mt.by_size(live, 50), mt.top_allocations(tl, 50), mt.phase_peaks(tl)]
        table = app.query_one("#memory-table")
        assert table.frame.equals(want[0])
        assert int(table.frame["Bytes"].sum()) == tl.peak["allocated"]  # every live byte, by site
        text = screen_text(app)
        assert "F forward_pass  B backward_pass  O optimizer_step" in text  # the trace's phases
        assert f"({tl.peak['allocated']:,} B)" in text and "▲" in text
        for name, frame in zip(
            ("Live at the peak, by size", "Largest allocations", "Allocated bytes per phase"), want[1:]
        ):
            await pilot.press("t")
            await pilot.pause()
            assert name in screen_text(app)
            assert table.frame.equals(frame)
        assert table.frame["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"] * 2
        await pilot.press("Y")
        assert app.clipboard.splitlines()[0].split("\t")[:2] == ["Phase", "Start (ms)"]


async def test_a_snapshot_alone_opens_in_the_memory_view(capture):
    snap = capture / "tiny_train.memory.pickle"
    app = KviewApp([str(snap)], use_cache=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.pause()
        assert app.return_code is None
        assert app.query_one("#tabs").active == "memory"
        data = app.view("memory").data
        assert data.timeline.peak["allocated"] == memory.open_memory(snap, use_cache=False).peak["allocated"]
        # the first table overflows 80x24: its columns are fitted beside the vertical scrollbar
        # (no sideways scrolling for a row that fits), for the table as laid out now
        table = app.query_one("#memory-table")
        shown = list(table.widths)
        assert table.show_vertical_scrollbar and not table.show_horizontal_scrollbar
        assert sum(w + 2 for w in shown) < table.scrollable_content_region.width < table.size.width
        table.relayout()
        assert table.widths == shown
        await pilot.press("2")
        await pilot.pause()
        assert "is a memory snapshot, not a trace" in screen_text(app)
        await pilot.press("5")
        await pilot.pause()
        assert "Memory snapshots only" in screen_text(app)
        await pilot.press("7")  # the Ranks view says so too, instead of loading for ever
        await pilot.pause()
        assert not app.view("ranks").has_ranks()
        assert "Memory snapshots only: open a run's traces to see its ranks" in screen_text(app)


async def test_a_trace_without_a_snapshot_says_how_to_record_one():
    app = explorer(str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite"))
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("8")
        await pilot.pause()
        assert "No allocator history beside this trace" in screen_text(app)
        assert "kview capture --memory" in app.view("memory").data.note


def test_a_bad_snapshot_is_refused_before_the_explorer_starts(tmp_path, capsys):
    bad = tmp_path / "x.pickle"
    bad.write_bytes(b"\x80\x04K\x01.")  # a pickle of the number 1
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.pickle" in err[0] and "not a PyTorch memory snapshot" in err[0]


def test_snapshot_of_the_memory_view(snap_compare, capture):
    """A snapshot opened alone at 80x24: the peak, the plot with its phases, the first table."""

    async def run_before(pilot):
        await loaded(pilot)
        await pilot.pause()

    app = KviewApp([str(capture / "tiny_train.memory.pickle")], use_cache=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
