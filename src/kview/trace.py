"""The normalized trace model: one object per opened trace, frames loaded on demand.

Each accessor loads only the columns it needs, once, and keeps the frame. Reports, analyses
and views ask this object, never the file. A parquet cache of the frames (kview.cache) makes
a second open of a large trace cheap.
"""

from __future__ import annotations

import os
import stat
from functools import cached_property
from pathlib import Path

import polars as pl

from kview.errors import TraceError
from kview.io import nsys_reader as nr
from kview.io.sqlite_source import SqliteSource, check_sqlite_file


class Trace:
    """An Nsight Systems export (or a kview capture in the same schema)."""

    def __init__(self, path: str | os.PathLike, use_cache: bool = True):
        self.path = Path(path).expanduser().absolute()
        self.src = SqliteSource(self.path)
        nr.check_nsys(self.src)
        self.use_cache = use_cache
        self._frames: dict[str, pl.DataFrame] = {}

    # -- facts -------------------------------------------------------------
    @cached_property
    def metadata(self) -> dict[str, str]:
        return nr.metadata(self.src)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def origin(self) -> int:
        """Time zero of the trace's timeline: nsys exports count from the session start already."""
        return 0

    @property
    def stem(self) -> str:
        return self.path.stem

    def has(self, table: str) -> bool:
        return self.src.has(table)

    def memo(self, key: str, build):
        """A derived result (analysis tables, trees) computed once per open trace."""
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = build()
        return memo[key]

    # -- frames --------------------------------------------------------------
    def _get(self, key: str, load):
        if key not in self._frames:
            frame = None
            if self.use_cache:
                from kview.io import cache

                frame = cache.load(self.path, key)
            if frame is None:
                frame = load()
                if self.use_cache:
                    from kview.io import cache

                    cache.store(self.path, key, frame)
            self._frames[key] = frame
        return self._frames[key]

    @property
    def strings(self) -> pl.DataFrame:
        return self._get("strings", lambda: nr.strings(self.src))

    def columns(self, key: str, names: list[str]) -> pl.DataFrame:
        """Columns `names` of a logical table (kernels, runtime, memcpy, memset, osrt).

        Only columns not loaded yet are read (from the cache, else from the trace), so a
        request pays for what it uses.
        """
        have = self._frames.get(key)
        missing = [n for n in names if have is None or n not in have.columns]
        if missing:
            got = {}
            if self.use_cache:
                from kview.io import cache

                for n in missing:
                    col = cache.load(self.path, f"{key}.{n}")
                    if col is not None:
                        got[n] = col.to_series()
            height = have.height if have is not None and have.width else None
            if len({len(c) for c in got.values()} | ({height} if height is not None else set())) > 1:
                from kview.errors import warn_once

                warn_once("cached columns of different lengths were ignored; the frames are rebuilt from the trace")
                got = {}
            todo = [n for n in missing if n not in got]
            if todo:
                fresh = nr.read_columns(self.src, key, todo)
                for n in todo:
                    got[n] = fresh[n]
                    if self.use_cache:
                        from kview.io import cache

                        cache.store(self.path, f"{key}.{n}", fresh.select(n))
            new = pl.DataFrame([got[n] for n in missing])
            have = new if have is None or have.width == 0 else have.hstack(new)
            self._frames[key] = have
        assert have is not None  # every name was loaded above
        return have.select(names)

    @property
    def nvtx_events(self) -> pl.DataFrame:
        """Raw NVTX range and domain rows, read when kview.nvtx_ranges builds its integer form.
        Neither kept nor cached: that compact form is what is cached, and the raw strings are
        the largest thing a trace holds."""
        return nr.nvtx_events(self.src)

    @cached_property
    def nvtx_max_timestamp(self) -> int | None:
        return nr.nvtx_max_timestamp(self.src)

    @cached_property
    def session_ns(self) -> int | None:
        """How long the recorded session lasted from time zero (None where the trace does not say)."""
        return nr.session_ns(self.src)

    @cached_property
    def memcpy_kind_labels(self) -> dict[int, str]:
        return nr.memcpy_kind_labels(self.src)

    @property
    def threads(self) -> pl.DataFrame:
        return self._get("threads", lambda: nr.threads(self.src))

    @property
    def processes(self) -> pl.DataFrame:
        return self._get("processes", lambda: nr.processes(self.src))

    @property
    def devices(self) -> pl.DataFrame:
        return self._get("devices", lambda: nr.devices(self.src))

    # -- helpers -------------------------------------------------------------
    @cached_property
    def _string_count(self) -> int:
        return int(self.src.scalar("SELECT count(*) FROM StringIds") or 0) if self.has("StringIds") else 0

    def string_values(self, ids: pl.Series) -> pl.DataFrame:
        """(id, value) for the given StringIds ids. Small string tables are read whole once;
        large ones (1M+ strings in long captures) only for the ids asked for."""
        ids = ids.drop_nulls().unique().cast(pl.Int64)
        if self._string_count <= 200_000 or "strings" in self._frames:
            return self.strings
        parts = []
        for i in range(0, len(ids), 20_000):
            chunk = ",".join(str(v) for v in ids[i : i + 20_000].to_list())
            parts.append(self.src.query(f"SELECT id, value FROM StringIds WHERE id IN ({chunk})"))
        if not parts:
            return pl.DataFrame(schema={"id": pl.Int64, "value": pl.String})
        return pl.concat(parts).select(pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))

    def with_strings(self, df: pl.DataFrame, id_col: str, out_col: str) -> pl.DataFrame:
        """Add the text of a StringIds id column (left join, so unknown ids give null)."""
        s = self.string_values(df[id_col]).rename({"id": id_col, "value": out_col})
        return df.join(s, on=id_col, how="left")


class JsonTrace(Trace):
    """A torch.profiler (Kineto) Chrome trace, `.json` or `.json.gz`, in the same model.

    The whole file is decoded once (event by event) into the normalized frames; those frames
    are cached like an export's columns, so a reopen skips the JSON entirely.
    """

    TABLES = {
        "CUPTI_ACTIVITY_KIND_KERNEL": "kernels",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "runtime",
        "CUPTI_ACTIVITY_KIND_MEMCPY": "memcpy",
        "CUPTI_ACTIVITY_KIND_MEMSET": "memset",
        "NVTX_EVENTS": "nvtx_events",
        "StringIds": "strings",
    }
    KEYS = ("kernels", "runtime", "memcpy", "memset", "nvtx_events", "strings", "processes", "devices")

    def __init__(self, path: str | os.PathLike, use_cache: bool = True):
        self.path = Path(path).expanduser().absolute()
        self.use_cache = use_cache
        self._frames = {}
        self.src = None  # type: ignore[assignment]  # no SQLite behind a JSON trace
        self._load()

    def _load(self) -> None:
        from kview.io import cache

        frames: dict[str, pl.DataFrame] = {}
        if self.use_cache:
            for k in self.KEYS + ("_meta",):
                f = cache.load(self.path, f"json.{k}")
                if f is None:
                    frames = {}
                    break
                frames[k] = f
        if not frames:
            from kview.io.kineto_reader import read

            try:
                kf = read(self.path)
            except TraceError:
                raise
            except (
                ValueError,
                TypeError,
                KeyError,
                AttributeError,
                IndexError,
                OverflowError,
                pl.exceptions.PolarsError,
            ) as e:  # an event of the wrong shape: the file's damage
                msg = str(e).splitlines()[0][:80] if str(e) else ""
                raise TraceError(
                    self.path, f"has an event kview cannot read ({type(e).__name__}{': ' + msg if msg else ''})"
                ) from None
            frames = {k: getattr(kf, k) for k in self.KEYS}
            frames["_meta"] = pl.DataFrame(
                {"name": list(kf.metadata), "value": list(kf.metadata.values())},
                schema={"name": pl.String, "value": pl.String},
            )
            if self.use_cache:
                for k, f in frames.items():
                    cache.store(self.path, f"json.{k}", f)
        self._json = frames

    @cached_property
    def metadata(self) -> dict[str, str]:
        return dict(self._json["_meta"].iter_rows())

    def has(self, table: str) -> bool:
        key = self.TABLES.get(table)
        return key is not None and self._json[key].height > 0

    def columns(self, key: str, names: list[str]) -> pl.DataFrame:
        return self._json[key].select(names)

    @property
    def nvtx_events(self) -> pl.DataFrame:
        return self._json["nvtx_events"]

    @property
    def strings(self) -> pl.DataFrame:
        return self._json["strings"]

    @cached_property
    def _string_count(self) -> int:
        return self._json["strings"].height

    @cached_property
    def origin(self) -> int:
        """Time zero of the trace's timeline: its earliest event (torch.profiler timestamps are
        clock readings, not offsets)."""
        keys = ("kernels", "runtime", "memcpy", "memset", "nvtx_events")
        firsts = [v for k in keys if (v := self._json[k].select(pl.col("start").min()).item()) is not None]
        return int(min(firsts)) if firsts else 0

    @cached_property
    def session_ns(self) -> int | None:
        return None  # a torch.profiler trace records no session bounds

    @cached_property
    def nvtx_max_timestamp(self) -> int | None:
        ev = self._json["nvtx_events"]
        found = [v for v in ev.select(pl.col("start").max(), pl.col("end").max()).row(0) if v is not None]
        return int(max(found)) if found else None

    @cached_property
    def memcpy_kind_labels(self) -> dict[int, str]:
        return dict(nr.MEMCPY_KIND_LABELS)

    @property
    def threads(self) -> pl.DataFrame:
        return pl.DataFrame(schema={"global_tid": pl.Int64, "name_id": pl.Int64})

    @property
    def processes(self) -> pl.DataFrame:
        return self._json["processes"]

    @property
    def devices(self) -> pl.DataFrame:
        return self._json["devices"]


def _sniff(p: Path) -> str:
    try:
        with open(p, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror})") from None
    if head.startswith(b"\x1f\x8b"):
        return "json"
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    return "sqlite"


SAMPLE = "lm-small_ctx256_train_nsys.sqlite"


def bundled_sample() -> Path | None:
    """The sample trace `kview` opens with no argument: from a checkout, or installed data."""
    import sys

    here = Path(__file__).resolve().parent
    for cand in (
        here.parents[1] / "sample_traces" / SAMPLE,
        Path(sys.prefix) / "share" / "kview" / "sample_traces" / SAMPLE,
    ):
        if cand.exists():
            return cand
    return None


def _kind(path: str | os.PathLike) -> tuple[Path, str]:
    """The path and its format ("json" or "sqlite"), or TraceError for what is no trace file."""
    p = Path(path).expanduser()
    try:  # one stat: a folder on the way the user cannot enter is a reason, not a traceback
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise TraceError(p, "no such file") from None
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(p, "is a folder, not a trace file")
    if st.st_size == 0:
        raise TraceError(p, "is empty")
    return p, _sniff(p)


def validate(path: str | os.PathLike) -> None:
    """Cheap checks before a UI starts: raises TraceError exactly as open_trace would for a
    missing, empty, foreign or damaged file, without reading the whole trace."""
    p, kind = _kind(path)
    if kind == "json":
        from kview.io.kineto_reader import _text, events_start

        # Structure only (what kind of JSON, complete to its closing brace): decoding every
        # event here would delay the first frame by the whole parse; damage deeper inside is
        # reported by the loader, in the same words.
        events_start(p, _text(p))
        return
    check_sqlite_file(p)
    Trace(p, use_cache=False).src.close()


def open_trace(path: str | os.PathLike, use_cache: bool = True) -> Trace:
    """Open any supported trace (nsys SQLite export, kview capture, torch.profiler JSON);
    raises TraceError with a one-line reason otherwise."""
    p, kind = _kind(path)
    if kind == "json":
        return JsonTrace(p, use_cache=use_cache)
    check_sqlite_file(p)
    return Trace(p, use_cache=use_cache)
