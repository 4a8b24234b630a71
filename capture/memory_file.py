"""Finish the allocator history of `kview capture --memory` beside its trace.

The profiled process wrote the snapshot with the wall-clock side of the clock pair (see
memory_history.py). Here, once the trace is exported, the marker range's start is read from the
trace, stored in the snapshot as `trace_ns`, and the marker is removed from the trace (it is no
range of the program). The snapshot then goes beside the trace: `run.sqlite` -> `run.memory.pickle`.

Standard library only (sqlite3): runs where `kview capture` runs, with or without polars.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kview.io import snapshot_pickle
from kview.io.snapshot_pickle import SUFFIX, memory_name  # noqa: F401  (re-exported for capture)


def marker_start(db: Path, name: str) -> int | None:
    """The start (trace clock, ns) of the first range called `name`, as text or a registered string."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "NVTX_EVENTS" not in tables:
            return None
        if "StringIds" in tables:
            sql, args = (
                "SELECT MIN(n.start) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id "
                "WHERE n.eventType IN (59, 60) AND (n.text = ? OR s.value = ?)",
                (name, name),
            )
        else:
            sql, args = "SELECT MIN(start) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND text = ?", (name,)
        row = con.execute(sql, args).fetchone()
        return row[0] if row and row[0] is not None else None
    finally:
        con.close()


def drop_range(db: Path, name: str) -> None:
    """Remove the push/pop range `name` (the unfinished tail step) from a trace we just wrote."""
    con = sqlite3.connect(db)
    try:
        con.execute(
            "DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND (text = ? OR textId IN "
            "(SELECT id FROM StringIds WHERE value = ?))",
            (name, name),
        )
        con.commit()
    finally:
        con.close()


def finalize(snapshot: Path, db: Path) -> str | None:
    """Store the trace side of the clock pair in `snapshot` and drop the marker from `db`; a note
    when the snapshot cannot be aligned with the trace."""
    data = snapshot_pickle.load(snapshot)
    facts = data.get(snapshot_pickle.KVIEW_KEY) or {}
    clock = facts.get("clock") or {}
    name = clock.get("marker")
    t = marker_start(db, name) if name else None
    note = None
    if t is None:
        note = (
            f"{db.name}: no {name or 'clock'} range in the trace, so the memory timeline cannot be placed on "
            f"the trace's time axis (its phases are not marked)"
        )
    else:
        clock["trace_ns"] = int(t)
        clock["trace"] = db.name
        facts["clock"] = clock
        data[snapshot_pickle.KVIEW_KEY] = facts
        snapshot_pickle.dump(data, snapshot)
        drop_range(db, name)
    return note
