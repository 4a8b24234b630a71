"""Print what the memory snapshots and traces of a folder hold (standard library and kview's
snapshot loader only): per snapshot the kview facts (clock pair, torch's peaks), the count of
each history action and the first record_function annotations; per trace the memory tables nsys
wrote (--cuda-memory-usage) with their columns and first rows.

    python bench/snapshot_facts.py DIR
"""

from __future__ import annotations

import glob
import os
import sqlite3
import sys

from kview.io.snapshot_pickle import load


def main(folder: str) -> None:
    for p in sorted(glob.glob(os.path.join(folder, "*.pickle"))):
        try:
            d = load(p)
        except Exception as e:  # what the loader refused: the globals the pickle names
            import pickle

            class Names(pickle.Unpickler):
                seen: set = set()

                def find_class(self, module, name):
                    self.seen.add(f"{module}.{name}")
                    return lambda *a, **k: None  # nothing the file names is called

            with open(p, "rb") as f:
                Names(f).load()
            names = Names.seen
            print(os.path.basename(p), "NOT LOADED:", e, "globals:", names)
            continue
        acts: dict[str, int] = {}
        for t in d["device_traces"]:
            for e in t:
                acts[e["action"]] = acts.get(e["action"], 0) + 1
        ann = d.get("external_annotations") or []
        print(
            os.path.basename(p),
            os.path.getsize(p),
            "keys",
            sorted(d),
            "kview",
            d.get("kview"),
            "actions",
            acts,
            "annotations",
            len(ann),
            ann[:3],
        )
    for f in sorted(glob.glob(os.path.join(folder, "*.sqlite"))):
        con = sqlite3.connect(f)
        names = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        mem = [n for n in names if "MEMORY" in n or "MEM_" in n]
        print(os.path.basename(f), os.path.getsize(f), mem)
        for n in mem:
            cols = [r[1] for r in con.execute(f"pragma table_info({n})")]
            print(" ", n, con.execute(f"select count(*) from {n}").fetchone()[0], cols)
            rows = con.execute(f"select * from {n}" + ("" if n.startswith("ENUM") else " limit 3")).fetchall()
            print("   ", rows)
        con.close()


if __name__ == "__main__":
    main(sys.argv[1])
