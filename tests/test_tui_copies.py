"""What the explorer copies is what it exports, with full names: the Kernels table, the
Overview's top kernels, and the Timeline, whose `y` is the picture `kview timeline -f md`
draws (its numbers on `Y`). The Kernels view's Layer column keeps each layer's index."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from test_tui import explorer, loaded  # noqa: E402
from test_tui_daily import lines  # noqa: E402

from kview.cli import main  # noqa: E402
from kview.output import render  # noqa: E402

from conftest import SAMPLES  # noqa: E402

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")


async def _copy_and_export(pilot, app, tmp_path, key: str, fmt: str) -> tuple[str, str]:
    await pilot.press(key)
    await pilot.pause()
    before = set(tmp_path.iterdir())
    app.export_as(fmt)
    (new,) = set(tmp_path.iterdir()) - before
    return app.clipboard, new.read_text()


async def test_copies_equal_exports_full_names_and_the_timeline_picture(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    app = explorer(LM)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        # Kernels: y and Y are the Markdown and TSV exports of the same table, full names in both
        await pilot.press("2")
        await pilot.pause()
        md, exported = await _copy_and_export(pilot, app, tmp_path, "y", "md")
        assert md == exported and md.startswith("| ")
        names = app.view("kernels").kern_sum.frame["Name"].to_list()
        assert all(render.md_escape(n) in md for n in names)
        tsv, exported = await _copy_and_export(pilot, app, tmp_path, "Y", "tsv")
        assert tsv == exported and all(n in tsv for n in names)
        # per-kernel rows: the Layer column keeps each layer's index on screen
        await pilot.press("t")
        await pilot.pause()
        screen = "\n".join(lines(app))
        assert "layer_0:" in screen and "…:attention_sublayer" not in screen
        # Overview: the focused Top kernels section copies with full names
        await pilot.press("1")
        await pilot.pause()
        ov = app.view("overview")
        for _ in range(len(ov.sections)):
            if app.focused is not None and getattr(app.focused, "title", "") == "Top kernels":
                break
            await pilot.press("tab")
            await pilot.pause()
        assert app.focused.title == "Top kernels"
        md, exported = await _copy_and_export(pilot, app, tmp_path, "y", "md")
        assert md == exported == render.to_markdown(ov.data.document.frame("kernels"))
        assert all(render.md_escape(k) in md for k in ov.data.document.frame("kernels")["Kernel"].to_list())
        # Timeline: y copies the picture, as `kview timeline -f md` draws that window at that width
        await pilot.press("6")
        await pilot.pause()
        tv = app.view("timeline")
        md, exported = await _copy_and_export(pilot, app, tmp_path, "y", "md")
        assert md == exported and md.startswith("```\n") and md.endswith("```\n")
        picture = md[4:-4]
        assert picture.splitlines()[0].startswith("lm-small_ctx256_train_nsys.sqlite")
        axis = [x for x in picture.splitlines() if "┌" in x]
        assert len(axis) == 1 and "│" in picture
        width = tv.canvas.size.width
        assert max(len(x) for x in picture.splitlines()) <= width
        tsv, exported = await _copy_and_export(pilot, app, tmp_path, "Y", "tsv")
        assert tsv == exported and tsv.startswith("Row\tGroup\tTrack\tCell")
        t0, t1 = tv.t0, tv.t1
    assert main(["timeline", LM, "--from", str(t0), "--to", str(t1), "--width", str(width), "-f", "md"]) == 0
    cli = capsys.readouterr().out
    # the same window, axis and GPU rows as the CLI's picture
    assert cli.splitlines()[:4] == md.splitlines()[:4]
    gpu = [x for x in cli.splitlines() if x.startswith("GPU0 s")]
    assert gpu and all(x in md.splitlines() for x in gpu)
