"""Key storms: every view's keys (each once, then Enter on a row and the global keys) and every
dialog's, sent as one read (0 ms apart: the app sees
them before it has handled the first) and 50 ms apart, on a trace with GPU kernels and one
without (a CPU-only torch.profiler trace). The app must answer every key and never end: the
storms that ended it were `e enter enter` and `T enter enter` in one read (a dialog dismissed
twice), `ctrl+p pageup` and `ctrl+p enter enter` (the command palette), and Enter on the CPU
ops of the Kernels view of a trace without kernels."""

from __future__ import annotations

import unicodedata

import pytest
import textual.constants
from test_tui import loaded
from textual import events
from textual.keys import REPLACED_KEYS, _get_unicode_name_from_key

from kview.tui.app import KviewApp
from kview.tui.keymap import TABLE_KEYS, TABLE_VIEWS, VIEW_KEYS
from kview.tui.views import shown_by

from conftest import KINETO, SAMPLES

WITH_KERNELS = str(SAMPLES / "lm-small_ctx256_forward_nsys.sqlite")
WITHOUT_KERNELS = str(KINETO / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
# keys that leave the app (q) or only repeat another key's work (alternatives after a comma)
LEAVE = {"q"}
GLOBAL = ["u", "y", "Y", "right_square_bracket", "left_square_bracket", "escape"]
# the dialogs, each opened and answered the way a fast typist (or a paste) does
DIALOGS = [
    ["e", "enter", "enter"],
    ["T", "enter", "enter"],
    ["e", "down", "down", "escape", "enter"],
    ["question_mark", "pagedown", "pageup", "escape", "escape"],
    ["ctrl+p", "pageup"],
    ["ctrl+p", "pagedown", "pageup", "escape"],
    ["ctrl+p", "enter", "enter"],
    ["ctrl+p", "down", "down", "up", "escape", "escape"],  # (enter there could run Quit, which is no crash)
    ["ctrl+p", *"kernels", "enter", "enter"],
    ["c", "enter", "escape", "escape"],
]


def _first(keys: str) -> str:
    return keys.split(",")[0]


def view_storm(vid: str) -> list[str]:
    """The view's own keys, the table keys where it is a table, and the global ones that do not
    open a dialog, each once, then Enter and the keys again (a drill-in's view of them)."""
    keys = [_first(k.keys) for k in VIEW_KEYS.get(vid, [])]
    if vid in TABLE_VIEWS:
        keys += [_first(k.keys) for k in TABLE_KEYS]
    keys = [k for k in keys if k not in LEAVE and k != "slash"]  # a filter line would take the rest as text
    return [*keys, "down", "enter", *GLOBAL, "slash", *"dur>1", "enter", "escape"]


def _key_event(key: str) -> events.Key:
    """The event the terminal driver posts for `key` (as Textual's pilot makes it)."""
    try:
        char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


@pytest.fixture(autouse=True)
def _tabs_slide(monkeypatch):
    """A storm meets the app mid-animation, as a user's keys do: the tabs' underline slides
    here (the other explorer tests move it at once, conftest)."""
    monkeypatch.setattr(textual.constants, "TEXTUAL_ANIMATIONS", "full")


async def _storm(pilot, keys: list[str], gap_ms: int) -> None:
    app = pilot.app
    if gap_ms == 0:  # one read: every key queued before the first is handled
        for key in keys:
            event = _key_event(key)
            event.set_sender(app)
            app._driver.send_message(event)
    else:
        for key in keys:
            await pilot.press(key)
            await pilot.pause(gap_ms / 1000)
    await pilot.pause()  # every queued key handled
    await pilot._wait_for_screen()
    await loaded(pilot)  # the work the keys started (a drill-in, a context lookup) is done
    await pilot.pause()


async def _back_to_the_views(pilot, keys: list[str]) -> None:
    app = pilot.app
    assert app.is_running and app.return_code is None, (keys, app._exception)
    while len(app.screen_stack) > 1:
        await app.pop_screen()
        await pilot.pause()


# 0 ms (one read) by default: the storms that ended the app did so there; 50 ms apart is nightly
@pytest.mark.parametrize("gap_ms", [0, pytest.param(50, marks=pytest.mark.nightly)], ids=["0ms", "50ms"])
# every view's storm on the CPU-only trace by default; on the GPU trace nightly
@pytest.mark.parametrize(
    "trace", [pytest.param(WITH_KERNELS, marks=pytest.mark.nightly), WITHOUT_KERNELS], ids=["gpu", "cpu-only"]
)
async def test_no_key_storm_ends_the_app(trace, gap_ms, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # exports land here
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # and copies here
    monkeypatch.delenv("DISPLAY", raising=False)
    app = KviewApp([trace], use_cache=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        tabs = app.query_one("#tabs")
        for key, view in shown_by():
            await _storm(pilot, [key], gap_ms)
            assert tabs.active == view.view_id
            await _storm(pilot, view_storm(view.view_id), gap_ms)
            await _back_to_the_views(pilot, view_storm(view.view_id))
            # every dialog over the Kernels table; over the other views, the two that ended the app
            for dialog in DIALOGS if view.view_id == "kernels" else DIALOGS[:2]:
                await _storm(pilot, [key, *dialog], gap_ms)
                await _back_to_the_views(pilot, [key, *dialog])
        assert app.is_running and app.return_code is None
    assert app.return_code in (None, 0)


async def test_enter_on_the_cpu_ops_of_a_trace_without_kernels_says_so(tmp_path):
    """The Kernels view of a CPU-only trace lists its CPU ops: Enter opens nothing and says why."""
    app = KviewApp([WITHOUT_KERNELS], use_cache=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        assert kv.table.frame.height > 0 and "_full" not in kv.table.frame.columns
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.is_running and kv.mode != "rows"
        assert any("no GPU kernels" in str(n.message) for n in app._notifications)
