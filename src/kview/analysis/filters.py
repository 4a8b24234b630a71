"""The kernel filter language, shared by `kview kernels --filter` and the TUI's `/`.

    gemm                 bare word: kernel name matches (case-insensitive regex)
    dir:bprop            field:value on dir, layer, op, cat, range, stream, device, kernel
    dur>50us  dur<=2ms   comparisons on dur, start, grid, block, idx, flops, tflops
                         (units ns, us, ms, s for times)
    -cat:memcpy          a leading '-' negates a term; terms combine with AND
    layer:"Enc_0:Attn"   quotes keep spaces together
"""
from __future__ import annotations

import re
import shlex

import polars as pl


class FilterError(ValueError):
    pass


TEXT_FIELDS = {"dir": "Direction", "layer": "Layer", "op": "Op", "cat": "Category", "range": "NVTX Path",
               "kernel": "Kernel", "params": "Params"}
EXACT_FIELDS = {"dir", "cat"}
INT_FIELDS = {"stream": "Stream", "device": "Device"}
UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
# grid and block compare their total thread-block / thread counts (hidden _grid, _block columns)
NUMERIC = {"dur": "Duration (ns)", "start": "Start (ns)", "idx": "Idx", "flops": "FLOPs", "tflops": "TFLOP/s",
           "grid": "_grid", "block": "_block"}
COMPARE = re.compile(r"^(?P<field>[a-z]+)\s*(?P<op><=|>=|==|!=|<|>|=)\s*(?P<num>[0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(?P<unit>[a-zµ]*)$",
                     re.IGNORECASE)
FIELDS_HELP = "dir, layer, op, cat, range, stream, device, kernel, params; comparisons on " + ", ".join(NUMERIC)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise FilterError(f"bad regular expression {value!r}: {e}") from None
    return "(?i)" + value


def term(text: str) -> pl.Expr:
    neg = text.startswith("-") and len(text) > 1
    body = text[1:] if neg else text
    m = COMPARE.match(body)
    if m:
        field, op, num, unit = m["field"].lower(), m["op"], float(m["num"]), m["unit"].lower()
        if field not in NUMERIC:
            raise FilterError(f"cannot compare {field!r} (numbers: {', '.join(NUMERIC)})")
        if unit:
            if field not in ("dur", "start") or unit not in UNITS:
                raise FilterError(f"unknown unit {unit!r} in {body!r} (times take ns, us, ms or s)")
            num *= UNITS[unit]
        col = pl.col(f"_{field}") if field in ("grid", "block") else pl.col(NUMERIC[field])
        e = {"<": col < num, "<=": col <= num, ">": col > num, ">=": col >= num, "=": col == num,
             "==": col == num, "!=": col != num}[op]
    elif ":" in body and body.split(":", 1)[0].lower() in {**TEXT_FIELDS, **INT_FIELDS}:
        field, value = body.split(":", 1)
        field = field.lower()
        if not value:
            raise FilterError(f"{field}: needs a value")
        if field in INT_FIELDS:
            try:
                e = pl.col(INT_FIELDS[field]) == int(value)
            except ValueError:
                raise FilterError(f"{field}: takes a number, not {value!r}") from None
        elif field in EXACT_FIELDS:
            e = pl.col(TEXT_FIELDS[field]).str.to_lowercase().str.starts_with(value.lower())
        else:
            e = pl.col(TEXT_FIELDS[field]).str.contains(_regex(value))
    elif re.match(r"^[a-z]+:", body, re.IGNORECASE) and not body.startswith(("http:", "std:")):
        raise FilterError(f"unknown field {body.split(':', 1)[0]!r} (fields: {FIELDS_HELP})")
    else:
        if re.match(r"^[a-z]+\s*(<|>|=)", body, re.IGNORECASE):
            raise FilterError(f"cannot read comparison {body!r} (e.g. dur>50us, grid>=1024)")
        e = pl.col("Kernel").str.contains(_regex(body))
    e = e.fill_null(False)
    return ~e if neg else e


def parse(expr: str) -> pl.Expr | None:
    """The whole expression as one polars predicate (None for an empty filter)."""
    try:
        tokens = shlex.split(expr)
    except ValueError as e:
        raise FilterError(f"cannot read filter: {e}") from None
    terms = [term(t) for t in tokens]
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = out & t
    return out


def apply(frame: pl.DataFrame, expr: str) -> pl.DataFrame:
    pred = parse(expr)
    return frame if pred is None else frame.filter(pred)
