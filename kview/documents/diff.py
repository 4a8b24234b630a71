"""Diff: `kview diff A B`, and its regression gate (`--gate`), which the explorer's Compare view
shows on `g`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kview.analysis import compare
from kview.analysis import gate as gating
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.trace import Trace

# the analysis's titles -> the names the sections go by
NAMES = {
    "Runs": "runs",
    "Totals": "totals",
    "Largest changes in total time": "time",
    "Largest changes in count": "count",
    "Kernels that appeared": "appeared",
    "Kernels that vanished": "vanished",
    "Phases": "phases",
}
TOP = 15  # `kview diff --top`
GATE_MIN = 1.0  # `kview diff --gate-min`


def diff(a: Trace, b: Trace, top: int = TOP) -> Document:
    """What changed from `a` to `b`: the runs (GPUs), totals, the `top` largest changes in time
    and count, the kernels that appeared or vanished, the phases. A note when the two ran on
    different GPUs."""
    tables = compare.diff(a, b, top)
    runs = tables["Runs"]
    ga, gb = runs["A"][1], runs["B"][1]
    notes = (
        (f"A ran on {ga}, B on {gb}: kernels and their times differ for that reason too",)
        if ga != gb and "?" not in (ga, gb)
        else ()
    )
    return Document(
        "Diff",
        tuple(Section(NAMES[title], title, frame) for title, frame in tables.items()),
        notes,
        f"kview diff {a.name} {b.name}" + (f" --top {top}" if top != TOP else ""),
        empty="(none)\n",
        suffix=f" (A = {a.name}, B = {b.name})",
    )


def gate(a: Trace, b: Trace, specs: list[str], min_share: float = GATE_MIN) -> tuple[Document, gating.Verdict]:
    """The regression gate of `b` against `a` (`kview diff A B --gate SPEC ...`): what got slower
    past its gate (the document's one table in every format; a person reads nothing when nothing
    did, a program still gets its header or `[]`), with every gated item beside it for a view
    (the regressed first). The note: the verdict and how the traces were measured. The verdict
    too, for the exit code."""
    v = gating.gate(a, b, gating.parse_gates(specs), min_share)
    n = v.regressed.height
    verdict = (
        f"{n} of {v.checked} gated items regressed past their gate"
        if n
        else f"passed: none of {v.checked} gated items regressed past its gate"
    )
    command = f"kview diff {a.name} {b.name}" + "".join(f" --gate {s}" for s in specs)
    command += f" --gate-min {min_share:g}" if min_share != GATE_MIN else ""
    doc = Document(
        "Gate",
        (Section("items", "Gated items", v.items, formats=()), Section("regressed", "Regressed", v.regressed)),
        (f"gate {a.name} -> {b.name}: {verdict}; {v.basis}",),
        command,
        written_empty=("json", "csv", "tsv"),
    )
    return doc, v
