"""A new view is one file plus one registration: a view defined here, registered, is shown on
its key with its title in the tab, the help screen and the command palette, and tui/app.py names
no view."""

from __future__ import annotations

import ast
import threading

import pytest
from test_tui import explorer, loaded
from textual.widgets import Static

from kview.analysis.attribution import attribute
from kview.reports import cuda_gpu_kern_sum
from kview.trace import open_trace
from kview.tui.app import KviewApp
from kview.tui.commands import commands
from kview.tui.keymap import VIEW_KEYS, Key, bindings
from kview.tui.messages import KernelSummary, Stage
from kview.tui.views import register, registered, shown_by, unregister
from kview.tui.views.base import View

from conftest import ROOT, SAMPLES

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")


# for each fetch of the view below: whether the view in front (Kernels) had its whole document
# by then (the app no longer waits for it, its kernels attributed): the other views fetch after
# it, so the first table waits for none of them
FETCHED_AFTER_THE_FRONT: list[bool] = []
APP: list[KviewApp] = []


def kernel_count(trace, use_cache: bool):
    """The view's document: the trace's kernel summary (its own worker fetches it)."""
    FETCHED_AFTER_THE_FRONT.append(APP[-1].front is None and trace.store.peek(attribute) is not None)
    yield Stage("counting kernel names")
    yield KernelSummary(cuda_gpu_kern_sum(trace).frame)


class KernelCountView(View, can_focus=True):
    """How many kernel names the trace's kernel summary holds; `w` says how many are GEMMs."""

    view_id = "kernel-count"
    title = "Kernel count"
    key = "x"  # the 11th view: past 0, it names its own key
    document = kernel_count
    keys = (Key("w", "gemms", "Count the GEMM kernels too", "gemms"),)
    BINDINGS = bindings(list(keys))
    names: list[str] = []

    def on_kernel_summary(self, m: KernelSummary) -> None:
        self.names = m.frame["Name"].to_list()
        self.show(Static(f"{m.frame.height} kernel names", id="kernel-count"))

    def action_gemms(self) -> None:
        gemms = sum("gemm" in n for n in self.names)
        self.query_one("#kernel-count", Static).update(f"{len(self.names)} kernel names, {gemms} GEMMs")


@pytest.fixture
def count_view():
    register(KernelCountView)
    yield KernelCountView
    unregister(KernelCountView.view_id)
    assert KernelCountView.view_id not in VIEW_KEYS  # its keys leave with it


async def test_a_view_registered_here_is_shown_on_its_key(count_view):
    key = dict((cls.view_id, k) for k, cls in shown_by())[count_view.view_id]
    assert key == "x" and registered()[-1] is count_view
    FETCHED_AFTER_THE_FRONT.clear()
    app = KviewApp([LM], use_cache=False)
    APP.append(app)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)  # the loads, then the view's own worker (the summary reached it so)
        assert FETCHED_AFTER_THE_FRONT == [True]
        view = app.views[count_view.view_id]
        await pilot.press(key)
        assert app.query_one("#tabs").active == count_view.view_id
        names = cuda_gpu_kern_sum(open_trace(LM, use_cache=False)).frame["Name"]
        assert str(view.query_one("#kernel-count", Static).render()) == f"{names.len()} kernel names"
        palette = [text for text, _ in commands(app)]
        assert f"View: {count_view.title}" in palette and f"{count_view.title}: Count the GEMM kernels too" in palette
        await pilot.press("question_mark")
        help_text = str(app.screen.query_one("#help-text").render())
        assert count_view.title in help_text and "Count the GEMM kernels too" in help_text
        await pilot.press("escape", "w")
        gemms = int(names.str.contains("gemm").sum())
        assert gemms > 0 and str(view.query_one("#kernel-count", Static).render()).endswith(f", {gemms} GEMMs")
        await pilot.press("1")
        assert app.query_one("#tabs").active == registered()[0].view_id


def test_app_names_no_view():
    """No view id (nor a widget id of a view) appears as a string in tui/app.py."""
    ids = {cls.view_id for cls in registered()}
    tree = ast.parse((ROOT / "tui" / "app.py").read_text())
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    named = [s for s in strings if s in ids or any(s.startswith(f"{i}-") or s == f"view-{i}" for i in ids)]
    assert named == [] and len(ids) == 10


async def test_kernels_regroups_off_the_ui_thread_to_the_same_tables(monkeypatch):
    """Each key's table is made in the view's worker: the same table as made directly from
    the state, and the UI thread makes none."""
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        kv = app.view("kernels")
        made_on: list[threading.Thread] = []
        table_of = kv.table_of

        def recorded(state):
            made_on.append(threading.current_thread())
            return table_of(state)

        monkeypatch.setattr(kv, "table_of", recorded)
        for keys in (["t"], ["g"], ["t"], ["slash", *"gemm", "enter"], ["F"], ["escape"]):
            await pilot.press(*keys)
            await loaded(pilot)  # the worker, then the table it handed back
            assert made_on and threading.main_thread() not in made_on
            assert kv.table.frame.equals(table_of(kv.state).frame), keys
            made_on.clear()
        assert kv.mode == "rows" and kv.filter_text == "gemm" and kv.table.frame.height > 0
