"""`kview ranks --cluster`: each rank file summarized on a worker of a real local Dask cluster
(two worker processes) into Parquet, the run's tables reduced from those files; every table
equals the one the process pool's run of the same files gives (ranks.open_run), on the DDP
pair, the public multi-rank fixtures and 64 rank files tiled from the DDP captures."""

from __future__ import annotations

import importlib.util
import json
import lzma
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from kview.analysis.rank_files import Step, SummarizedRun, cached_tables, entry_key, summarize
from kview.analysis.ranks import open_run
from kview.cli import PARTIAL_EXIT, main
from kview.documents.ranks import run_tables

from conftest import KINETO, PUBLIC, ROOT

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

pytest.importorskip("distributed")

CAPTURE = ROOT / "tests" / "fixtures" / "capture"
HTA = [KINETO / "trace_filter__sampled_rank-0.json.gz", KINETO / "trace_filter__sampled_rank-1.json.gz"]
NSYSAI = sorted(PUBLIC.glob("nsysai_*.sqlite"))


@pytest.fixture(scope="module")
def client():
    """A local cluster of two worker processes, started once for the module."""
    from kview.cluster import connected

    with connected("local:2") as c:
        yield c


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("ddp")
    out = []
    for r in (0, 1):
        path = d / f"ddp_nsys.rank{r}.sqlite"
        with lzma.open(CAPTURE / f"ddp_nsys.rank{r}.sqlite.xz") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.append(path)
    return out


def on_cluster(client, files, cache_dir, compare=None) -> tuple[SummarizedRun, list]:
    from kview.cluster import summarize_on

    step = Step(str(cache_dir), use_cache=False, compare=compare)
    done = {d.path: d for d in summarize_on(client, [str(f) for f in files], step)}
    good = [done[str(f)] for f in files if done[str(f)].tables is not None]
    return SummarizedRun([d.path for d in good], [d.tables for d in good]), [d for d in done.values() if not d.tables]


def in_pool(files) -> dict:
    """The tables of `kview ranks` and `kview iterations` from the process pool's run."""
    run = open_run([str(f) for f in files], use_cache=True, jobs=2)  # jobs: the pool, whatever the size
    return {**run_tables(run, "ranks"), **run_tables(run, "iterations")}, run.notes


def assert_same_tables(summarized: SummarizedRun, pool: dict, notes: list[str]) -> None:
    mine = {**summarized.tables_of("ranks"), **summarized.tables_of("iterations")}
    assert mine.keys() == pool.keys()
    for name, frame in pool.items():
        # rows of equal sort keys (collectives of equal time) come in either order in both
        assert (
            mine[name].sort(mine[name].columns, nulls_last=True).equals(frame.sort(frame.columns, nulls_last=True))
        ), name
        assert mine[name].columns == frame.columns and mine[name].schema == frame.schema, name
    assert summarized.notes == notes


def test_the_ddp_pair_on_a_cluster_equals_the_process_pool(client, ddp, tmp_path):
    summarized, failed = on_cluster(client, ddp, tmp_path / "summaries")
    assert not failed
    pool, notes = in_pool(ddp)
    assert_same_tables(summarized, pool, notes)
    # the run is the DDP run: rank 1 sleeps before each step, so rank 0 waits in every iteration
    assert summarized.ranks == [0, 1]
    st = summarized.tables_of("ranks")["stragglers"]
    assert st.height and (st["Straggler"] == 1).all()


@pytest.mark.parametrize("files", [HTA, *[[p] for p in NSYSAI]], ids=["hta", *[p.stem for p in NSYSAI]])
def test_public_multi_rank_fixtures_on_a_cluster_equal_the_process_pool(client, files, tmp_path):
    summarized, failed = on_cluster(client, files, tmp_path / "summaries")
    assert not failed
    pool, notes = in_pool(files)
    assert len(summarized.ranks) == 2 and pool["ranks"].height == 2
    assert_same_tables(summarized, pool, notes)


def _tile():
    spec = importlib.util.spec_from_file_location("tile_trace", ROOT / "bench" / "tile_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tile


@pytest.mark.nightly  # the DDP pair and the public multi-rank fixtures check the same by default
def test_64_tiled_rank_files_on_a_cluster_equal_the_process_pool(client, ddp, tmp_path):
    """64 rank files: the two DDP ranks as captured and tiled twice along time (their steps
    numbered on), hard-linked under 64 names. Every file says RANK 0 or 1, so the run numbers
    the ranks in file order, from the files' own tables numbered 0 and 1."""
    tile = _tile()
    sources = list(ddp)
    for p in ddp:
        tiled = tmp_path / f"{p.stem}_x2.sqlite"
        tile(str(p), 2, str(tiled), distinct_labels=True)
        sources.append(tiled)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files = []
    for r in range(64):
        f = run_dir / f"tiled.rank{r}.sqlite"
        os.link(sources[r % len(sources)], f)
        files.append(f)
    summarized, failed = on_cluster(client, files, tmp_path / "summaries")
    assert not failed
    pool, notes = in_pool(files)
    assert summarized.ranks == list(range(64)) and notes and "file, device and process order" in notes[0]
    assert_same_tables(summarized, pool, notes)
    waits = summarized.tables_of("ranks")["waits"]
    assert waits["Ranks"].max() == 64  # instances of the first copy's steps ran on every rank


def test_a_rerun_reads_the_summaries_and_an_edit_or_a_foreign_file_is_never_read(ddp, tmp_path):
    cache = tmp_path / "summaries"
    a, b = (str(tmp_path / p.name) for p in ddp)
    for p, q in zip(ddp, (a, b)):
        shutil.copy(p, q)
    first = summarize(a, str(cache), use_cache=False)
    assert cached_tables(cache, a) == first  # what a rerun finds
    assert cached_tables(cache, b) is None
    second = summarize(b, str(cache), use_cache=False)
    # a table of another file's entry copied over this one's: its key says so, the entry is not read
    shutil.copy(second["iterations"], first["iterations"])
    assert cached_tables(cache, a) is None
    again = summarize(a, str(cache), use_cache=False)
    assert pl.read_parquet(again["iterations"]).equals(
        pl.read_parquet(summarize(str(ddp[0]), str(tmp_path / "fresh"), use_cache=False)["iterations"])
    )
    # the file edited (a new mtime): a new key, the old summary is not read
    key = entry_key(a)
    st = os.stat(a)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert entry_key(a) != key and cached_tables(cache, a) is None
    # an entry whose manifest was never written (a worker killed mid-way) is not read either
    manifest = Path(second["units"]).parent / "manifest.json"
    manifest.unlink()
    assert cached_tables(cache, b) is None


def test_cli_reports_the_ranks_that_worked_names_the_file_that_failed_and_reruns_from_the_cache(
    client, ddp, tmp_path, capsys
):
    """On the module's cluster, by its scheduler's address (as a user names a cluster started
    elsewhere; the `client` fixture starts it as `--cluster local:2` does)."""
    run = tmp_path / "run"
    run.mkdir()
    for p in ddp:
        shutil.copy(p, run / p.name)
    bad = run / "ddp_nsys.rank2.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)  # damaged: a header and nothing else
    cache = tmp_path / "summaries"
    argv = ["ranks", str(run), "--cluster", client.scheduler.address, "--cache-dir", str(cache), "-f", "json"]
    assert main(argv) == PARTIAL_EXIT
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert sum(f"ddp_nsys.rank{r}.sqlite summarized" in line for line in lines for r in (0, 1)) == 2
    named = [line for line in lines if line.startswith(f"kview: {bad}: ")]
    assert len(named) == 1, err
    assert "1 of 3 rank files failed" in err and "Traceback" not in err
    assert main(["ranks", *[str(run / p.name) for p in ddp], "-f", "json", "--no-cache"]) == 0
    assert json.loads(out) == json.loads(capsys.readouterr()[0])
    bad.unlink()
    assert main(argv) == 0  # every summary in the cache: no cluster is started
    out2, err = capsys.readouterr()
    assert out2 == out and err.count("read from the cache") == 2 and "summarized" not in err


def test_cluster_options_said_wrong_are_one_line(tmp_path, capsys, ddp):
    assert main(["ranks", str(ddp[0]), "--cache-dir", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip() == "kview: --cache-dir: goes with --cluster (the folder its workers write into)"
    )
    assert main(["ranks", str(ddp[0]), "--cluster", "tcp://127.0.0.1:1"]) == 2
    assert "needs --cache-dir" in capsys.readouterr().err
    assert main(["ranks", str(ddp[0]), "--cluster", "local:0"]) == 2
    assert capsys.readouterr().err.strip() == "kview: --cluster: takes local:N with N of 1 or more"


@pytest.mark.parametrize("which", ["ddp", "nsysai"])
def test_compare_of_ranks_on_a_cluster_equals_the_one_of_open_traces(client, ddp, which, tmp_path):
    from kview.analysis.compare import rank_windows, side_by_side
    from kview.analysis.ranks import make_run
    from kview.trace import open_trace

    files = ddp if which == "ddp" else NSYSAI[:1]
    run = make_run([open_trace(str(f), use_cache=False) for f in files])
    for by, metric in (("range", "gpu"), ("range", "cpu"), ("category", "gpu"), ("kernel", "gpu"), ("layer", "gpu")):
        summarized, failed = on_cluster(client, files, tmp_path / "summaries", (by, metric, None))
        assert not failed
        mine, theirs = summarized.compare(by), side_by_side(rank_windows(run), by, metric, True)
        assert (
            mine.columns
            == theirs.columns
            == [mine.columns[0], "rank 0", "rank 1", "Spread (ns)", "Spread (%)", "Longest"]
        )
        assert mine.height > 0 and mine.equals(theirs), (by, metric)


def test_cli_compare_ranks_from_the_summaries_equals_compare_ranks(client, ddp, tmp_path, capsys):
    cache = tmp_path / "summaries"
    on_cluster(client, ddp, cache, ("category", "gpu", None))  # what a first run left in the cache
    files = [str(f) for f in ddp]
    argv = ["compare", *files, "--by", "category", "-f", "csv"]
    # the module's cluster by its address: `local:2` starts the same through the `client` fixture
    assert main([*argv, "--cluster", client.scheduler.address, "--cache-dir", str(cache)]) == 0
    out, err = capsys.readouterr()
    assert err.count("read from the cache") == 2
    assert main([*argv, "--ranks", "--no-cache"]) == 0
    assert out == capsys.readouterr()[0]
    assert main([*argv, "--cluster", "local:2", "--metric", "cpu"]) == 2
    assert capsys.readouterr().err.strip() == "kview: --metric cpu applies to ranges only (use --by range)"


@pytest.mark.nightly  # the slowest of the default run (a cluster and the explorer): the CLI's cluster tests run by default
async def test_the_explorer_opens_a_run_from_its_summaries_and_loads_a_rank_when_shown(client, ddp, tmp_path):
    """`kview run/ --cluster local:2`, the summaries a first run left in the cache folder (so no
    cluster starts here): the Ranks view and Compare of the ranks come from the summaries, equal
    to those of the open traces; only the first trace loads its views, another when shown."""
    from test_tui import loaded, screen_text

    from kview.analysis.compare import rank_windows, side_by_side
    from kview.analysis.critical_path import with_bound_by
    from kview.analysis.iterations import iteration_table
    from kview.analysis.rank_summary import BAR_TITLE, rank_summary
    from kview.analysis.ranks import make_run
    from kview.trace import open_trace
    from kview.tui.app import KviewApp

    cache = tmp_path / "summaries"
    on_cluster(client, ddp, cache)
    on_cluster(client, ddp, cache, ("category", "gpu", None))
    run = make_run([open_trace(str(f), use_cache=False) for f in ddp])
    app = KviewApp([str(f) for f in ddp], use_cache=False, cluster=("local:2", str(cache)))
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert app.run_in_processes and app.started == {0} and set(app.loaded) == {0}
        data = app.view("ranks").data
        assert data.ranks.frame("time").equals(rank_summary(run)), data.caption
        assert BAR_TITLE in data.ranks.section("time").frame_for("table").columns
        assert data.iterations.frame("iterations").equals(with_bound_by(run, iteration_table(run)))
        assert "straggler: rank 1 in 3 of 3 iterations" in data.caption
        await pilot.press("5")
        await loaded(pilot)
        compare = app.view("compare").data
        assert compare.ranks and compare.frame.equals(side_by_side(rank_windows(run), "category", "gpu", True))
        assert "--cluster local:2 --by category" in compare.caption and app.started == {0}
        await pilot.press("T")
        assert "ddp_nsys.rank1.sqlite  (loads when shown)" in screen_text(app)
        await pilot.press("2")
        await loaded(pilot)
        assert set(app.loaded) == {0, 1}
