"""Parquet cache of normalized frames, under the user cache dir, never beside the trace.

The cache is an optimization only. Any problem with it (a full disk, a cache folder that cannot
be made or entered, a damaged, foreign or stale entry) means the frames are built from the trace
in memory, with one warning per kind of problem, never a failure.

An entry is keyed by the trace's resolved path and a cheap content fingerprint: size, mtime,
ctime and inode, plus for SQLite the header's change counter and a hash of the first, last and
a few evenly spaced pages, for JSON a hash of its first and last 64 KiB (a .gz's last bytes are
the content's CRC and length). An edit that keeps size and mtime changes the fingerprint, so it
gets a new entry. Every file of an entry carries that fingerprint and the key it answers in its
Parquet metadata, checked when read, so a file copied in from another trace's entry is never
served; a derived table's file also carries the table's version (kview.derived), and one of
other rules is dropped and made again, never served stale; and ends in a checksum of its bytes (CRC-32 and length after a magic), checked before
Parquet reads a byte of it, so a damaged file is dropped and rebuilt (one warning), never read
into wrong numbers or a decoder's panic. Anything not a regular file in the place of an entry (a
folder, a link, a FIFO) is removed, or bypassed for that entry only when it cannot be.
Files are written to a temporary and renamed into place; temporaries of killed runs are removed.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import polars as pl

from kview import __version__, atomic_write
from kview.warning import warn_once

# the cache files' format and the readers' frames (a derived table's rules are its own version,
# kview.derived, written in each file it makes and checked when read):
# 3: torch.profiler frames with exact ns, every era's categories, host processes only;
# 4: torch.profiler module calls (python_function `nn.Module: X`) as ranges of the nn.Module domain;
# 5: torch.profiler kernels with collective bytes, distributedInfo (rank, world size, backend);
# 6: the attributed table and the nsys reports' results kept; 7: process ids Int64, not Int128;
# 8: the attributed table's TC a boolean;
# 9: derived tables of torch.profiler traces count from the trace's zero, Kineto base time kept;
# 10: a checksum after the Parquet bytes;
# 11: bprop from the autograd engine's thread and ranges named like backward; rank ops carry their launch
# 12: phase times over the phase instances only (a phase's name nested in another phase not counted twice)
# 13: each derived table's version in its files' metadata (kview.version), in place of bumps of this one
FORMAT_VERSION = "13"
SQLITE_MAGIC = b"SQLite format 3\x00"
SAMPLES = 8  # pages hashed between the first and the last
JSON_EDGE = 1 << 16
META_FINGERPRINT, META_KEY, META_VERSION = "kview.fingerprint", "kview.key", "kview.version"
# what follows the Parquet bytes of a cache file: magic, CRC-32 and length of those bytes
TRAILER = struct.Struct("<8sIQ")
MAGIC = b"kvcache\x01"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(base):
        return Path(base) / "kview"
    if base and sys.platform not in ("darwin", "win32"):  # relative: the XDG spec says to ignore it
        return Path.home() / ".cache" / "kview"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kview", appauthor=False))


def content_fingerprint(path: Path, size: int) -> str:
    """A hash of the bytes that change with any edit of the trace, read in a few small reads."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        head = f.read(100)
        h.update(head)
        if head.startswith(SQLITE_MAGIC) and len(head) == 100:
            page = int.from_bytes(head[16:18], "big")
            page = 65536 if page == 1 else max(page, 512)
            offsets = [
                0,
                *(size * i // (SAMPLES + 1) // page * page for i in range(1, SAMPLES + 1)),
                max(size - page, 0),
            ]
            reads = [(o, page) for o in offsets]  # the header's change counter is in page 1
        else:
            reads = [(0, JSON_EDGE), (max(size - JSON_EDGE, 0), JSON_EDGE)]
        for offset, n in reads:
            f.seek(offset)
            h.update(f.read(n))
    return h.hexdigest()


_fingerprints: dict[tuple, str] = {}


def fingerprint(trace_path: Path) -> tuple[str, str] | None:
    """(resolved path, fingerprint) of the trace as it is now; None if it cannot be read."""
    try:
        resolved = str(trace_path.resolve())
        st = os.stat(resolved)
        ident = (resolved, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        if ident not in _fingerprints:  # once per state of the file, not once per column
            content = content_fingerprint(Path(resolved), st.st_size)
            text = "|".join(map(str, (*ident, content, __version__, FORMAT_VERSION)))
            _fingerprints[ident] = hashlib.sha256(text.encode()).hexdigest()
        return resolved, _fingerprints[ident]
    except OSError:
        return None


_broken: set[Path] = set()  # cache folders that cannot be used: not tried again in this process


def _unusable(e: BaseException) -> None:
    _broken.add(cache_root())
    why = getattr(e, "strerror", None) or str(e).splitlines()[0][:120] or type(e).__name__
    warn_once(
        f"the cache under {cache_root()} cannot be used ({why}); kview builds what it needs from the trace "
        f"in memory on every run"
    )


def _entry(trace_path: Path) -> tuple[Path, str, str] | None:
    if cache_root() in _broken:
        return None
    fp = fingerprint(trace_path)
    if fp is None:
        return None
    resolved, digest = fp
    return cache_root() / "frames" / digest[:32], digest, resolved


def has(trace_path: Path, keys: list[str] | tuple[str, ...], version: str = "") -> bool:
    """Whether the cache holds a file for every one of `keys` of this trace, made by `version`
    (reading one still checks it: this answers "is it worth starting from the cache", not "is
    it valid")."""
    try:
        found = _entry(trace_path)
        return found is not None and all(_made_by(found[0] / f"{k}.parquet", version) for k in keys)
    except OSError:
        return False


def _made_by(f: Path, version: str) -> bool:
    """Whether cache file `f` is a file that names `version` in its Parquet footer: the footer's
    bytes are searched, not parsed (a damaged file is found out when it is read)."""
    with open(f, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size < TRAILER.size + 12:
            return False
        if not version:
            return True
        fh.seek(st.st_size - TRAILER.size)
        magic, _, length = TRAILER.unpack(fh.read(TRAILER.size))
        if magic != MAGIC or length + TRAILER.size != st.st_size:
            return False
        fh.seek(length - 8)
        footer_size = int.from_bytes(fh.read(4), "little")
        if not 0 < footer_size <= length - 12:
            return False
        fh.seek(length - 8 - footer_size)
        footer = fh.read(footer_size)
    return META_VERSION.encode() in footer and version.encode() in footer


def _not_a_file(f: Path, what: str) -> bool:
    """Remove the non-file in the place of cache file `f` (True), or say it stays there and that
    entry is bypassed (False); one warning either way."""
    try:
        if what == "folder":
            shutil.rmtree(f)
        else:
            f.unlink()
    except OSError as e:
        warn_once(
            f"{f} is a {what}, not a cache file, and cannot be removed ({e.strerror or e}); that entry is "
            f"built from the trace in memory on every run"
        )
        return False
    warn_once(f"a {what} in the place of a cache file was removed; the frames are rebuilt from the trace")
    return True


def _kind(mode: int) -> str:
    return "folder" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "special file"


def _read_verified(f: Path) -> bytes | None:
    """The Parquet bytes of cache file `f` if its checksum holds; None when there is no file
    (a non-file there is removed); ValueError when the bytes do not verify."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(f, flags)  # never follows a link, never waits on a FIFO
    except FileNotFoundError:
        return None
    except OSError:
        try:
            mode = os.lstat(f).st_mode
        except OSError:
            return None
        if not stat.S_ISREG(mode):
            _not_a_file(f, _kind(mode))
            return None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a folder (or a device) opens; Python's open() would refuse it
        os.close(fd)
        _not_a_file(f, _kind(st.st_mode))
        return None
    with open(fd, "rb", closefd=True) as fh:
        if st.st_size < TRAILER.size:
            raise ValueError("shorter than its checksum")
        body = fh.read(st.st_size - TRAILER.size)
        tail = fh.read(TRAILER.size)
    if len(tail) != TRAILER.size:
        raise ValueError("changed while read")
    magic, crc, length = TRAILER.unpack(tail)
    if magic != MAGIC or length != len(body) or zlib.crc32(body) != crc:
        raise ValueError("checksum does not match")
    return body


def load(trace_path: Path, key: str, version: str = "") -> pl.DataFrame | None:
    """The cached frame `key` of this trace made by `version` of its rules (a derived table's
    digest; "" for the readers' frames), or None (absent, unusable, stale, or not this trace's)."""
    found = verified(trace_path, key, version)
    if found is None:
        return None
    body, f = found
    try:
        return pl.read_parquet(body)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # verified bytes polars cannot read (another kview's format): rebuilt
        _damaged(f)
        return None


def verified(trace_path: Path, key: str, version: str = "") -> tuple[bytes, Path] | None:
    """The Parquet bytes of cached frame `key` of this trace made by `version`, checked as
    `load` checks them (checksum, trace, key, version) but not decoded, and their file; None
    as `load`. A caller reads the columns or rows it needs of them (`pl.read_parquet(body,
    columns=...)`, `pl.scan_parquet(body)`)."""
    found = _entry(trace_path)
    if found is None:
        return None
    d, digest, _ = found
    f = d / f"{key}.parquet"
    try:
        body = _read_verified(f)
        if body is None:
            return None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ELOOP):
            _unusable(e)
        else:  # EIO and friends on this file only
            warn_once("a cache entry that cannot be read was ignored; the frames are rebuilt from the trace")
            _drop(f)
        return None
    except ValueError:
        _damaged(f)
        return None
    try:
        meta = pl.read_parquet_metadata(io.BytesIO(body))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # verified bytes polars cannot read (another kview's format): rebuilt
        _damaged(f)
        return None
    if meta.get(META_FINGERPRINT) != digest or meta.get(META_KEY) != key:
        warn_once(
            "a cache entry that belongs to another trace or frame was ignored; the frames are rebuilt from the trace"
        )
        _drop(f)
        return None
    if meta.get(META_VERSION, "") != version:  # made by other rules: stale, made again
        _drop(f)
        return None
    return body, f


def _damaged(f: Path) -> None:
    """Cache file `f` found damaged: said once and removed (the frames are made again)."""
    warn_once("a damaged cache entry was ignored; the frames are rebuilt from the trace")
    _drop(f)


def _drop(f: Path) -> None:
    try:
        f.unlink()
    except OSError:
        pass


def _clear_way(p: Path, folder: bool = False) -> bool:
    """Whether `p` is free for a file (or, with `folder`, is a folder or free for one): a
    non-file (or a non-folder) there is removed first."""
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return True
    if stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode):
        return True
    return _not_a_file(p, "file" if stat.S_ISREG(mode) else _kind(mode))


def _new_entry(d: Path, resolved: str) -> None:
    """Create entry `d`, dropping older entries of the same trace (an edited or re-exported
    trace gets a new key; its old frames would otherwise stay forever)."""
    frames = d.parent
    frames.mkdir(parents=True, exist_ok=True)
    _clear_way(d, folder=True)
    for other in frames.iterdir():
        try:
            if other != d and (other / "source").read_text() == resolved:
                shutil.rmtree(other, ignore_errors=True)
        except OSError:
            continue
    d.mkdir(exist_ok=True)
    if not _clear_way(d / "source"):
        return
    with atomic_write.replacing(d / "source") as tmp:
        atomic_write.write_bytes(tmp, resolved.encode())


_swept: set[Path] = set()


def _sweep_temporaries(d: Path) -> None:
    """Remove temporaries left by runs that were killed mid-write (their pid is gone)."""
    if d in _swept:
        return
    _swept.add(d)
    for p in d.glob(".*.kview-*.tmp"):
        try:
            pid = int(p.name.rsplit(".kview-", 1)[1][:-4])
            os.kill(pid, 0)
        except ProcessLookupError:
            _drop(p)
        except (ValueError, OSError):
            continue


def store(trace_path: Path, key: str, frame: pl.DataFrame, version: str = "", whole: bool = False) -> None:
    """Cache `frame` as `key` of this trace (`whole`: in one row group, so it reads back in one
    chunk); any failure only turns the cache off (one warning)."""
    found = _entry(trace_path)
    if found is None:
        return
    d, digest, resolved = found
    f = d / f"{key}.parquet"
    try:
        if not d.is_dir() or os.path.islink(d):
            _new_entry(d, resolved)
        if not os.path.isdir(d) or not _clear_way(f):  # a non-file that stays: this entry is bypassed
            return
        _sweep_temporaries(d)
        with atomic_write.replacing(f) as tmp:
            frame.write_parquet(
                tmp,
                compression="lz4",
                statistics=False,
                row_group_size=max(frame.height, 1) if whole else None,
                metadata={META_FINGERPRINT: digest, META_KEY: key, **({META_VERSION: version} if version else {})},
            )
            _append_checksum(tmp)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # OSError, polars' ComputeError on a full disk, a folder in the way
        _unusable(e)


def _append_checksum(tmp: Path) -> None:
    crc, length = 0, 0
    with open(tmp, "r+b") as fh:
        while chunk := fh.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
            length += len(chunk)
        fh.write(TRAILER.pack(MAGIC, crc, length))


def clear() -> None:
    shutil.rmtree(cache_root() / "frames", ignore_errors=True)


def cached(trace_path: Path, key: str, build: Callable[[], pl.DataFrame], use: bool = True) -> pl.DataFrame:
    """Frame `key` of this trace from the cache, else built and stored (with `use` False: built)."""
    frame = load(trace_path, key) if use else None
    if frame is None:
        frame = build()
        if use:
            store(trace_path, key, frame)
    return frame


def load_all(trace_path: Path, keys: list[str] | tuple[str, ...], version: str = "") -> dict[str, pl.DataFrame] | None:
    """The frames `keys` of this trace (made by `version`), all of them or None."""
    frames = {}
    for k in keys:
        f = load(trace_path, k, version)
        if f is None:
            return None
        frames[k] = f
    return frames


def store_all(trace_path: Path, frames: dict[str, pl.DataFrame], version: str = "", whole: bool = False) -> None:
    for k, f in frames.items():
        store(trace_path, k, f, version, whole)
