r"""The kernel filter language, shared by `kview kernels --filter` and the TUI's `/`.

    gemm                 bare word: kernel name matches (case-insensitive regex)
    dir:bprop            field:value on dir, layer, op, cat, range, stream, device, kernel
                         (dir: and cat: take a known value or its start; layer: matches whole
                         `:` segments, so layer:layer_1 is not layer_10)
    dur>50us  dur<=2ms   comparisons (<, <=, >, >=, ==, !=) on dur, start, grid, block, idx,
                         flops, tflops
                         (units ns, us, ms, s for times; `dur > 1ms` with spaces reads the same)
    -cat:memcpy          a leading '-' negates a term; terms combine with AND
    layer:"Enc_0:Attn"   quotes keep spaces together; backslashes are kept (layer:^layer_\d+$)

Regular expressions are checked by the engine that runs them (polars', Rust's `regex`: no
look-around or backreferences; `a{` is an error, not a literal), so a pattern Python accepts
but polars rejects is a filter error, never a crash. The terms are combined flat (all_horizontal),
so the cost grows linearly with their number.
"""

from __future__ import annotations

import re

import polars as pl

from kview.analysis.categories import CATEGORIES


class FilterError(ValueError):
    pass


def regex_problem(pattern: str) -> str | None:
    """Why polars' regex engine rejects `pattern` (one line), or None if it accepts it."""
    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except pl.exceptions.PolarsError as e:
        found = re.search(r"^error: (.+)$", str(e), re.MULTILINE)
        return found[1] if found else str(e).splitlines()[0]
    return None


def _check(regexes: list[tuple[str, str]]) -> None:
    """Raise FilterError for the first (typed value, pattern) the engine rejects. All patterns
    are compiled in one polars call; only when that fails are they tried one by one."""
    if not regexes:
        return
    try:
        pl.DataFrame({"p": [p for _, p in regexes]}).select(pl.lit("").str.contains(pl.col("p")))
        return
    except pl.exceptions.PolarsError:
        pass
    for value, pattern in regexes:
        why = regex_problem(pattern)
        if why:
            raise FilterError(f"bad regular expression {value!r}: {why}")


TEXT_FIELDS = {
    "dir": "Direction",
    "layer": "Layer",
    "op": "Op",
    "cat": "Category",
    "range": "NVTX Path",
    "kernel": "Kernel",
    "params": "Params",
}
# fields with a closed set of values: a value that starts none of them is an error, not silence
EXACT_FIELDS = {"dir": ("fprop", "bprop", "optim"), "cat": CATEGORIES}
INT_FIELDS = {"stream": "Stream", "device": "Device"}
UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
# grid and block compare their total thread-block / thread counts (hidden _grid, _block columns)
NUMERIC = {
    "dur": "Duration (ns)",
    "start": "Start (ns)",
    "idx": "Idx",
    "flops": "FLOPs",
    "tflops": "TFLOP/s",
    "grid": "_grid",
    "block": "_block",
}
COMPARE = re.compile(
    r"^(?P<field>[a-z]+)\s*(?P<op><=|>=|==|!=|<|>|=(?!=))\s*(?P<num>[0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(?P<unit>[a-zµ]*)$",
    re.IGNORECASE,
)
FIELDS_HELP = "dir, layer, op, cat, range, stream, device, kernel, params; comparisons on " + ", ".join(NUMERIC)


def _regex(value: str, regexes: list[tuple[str, str]] | None) -> str:
    pattern = "(?i)" + value
    if regexes is None:
        _check([(value, pattern)])
    else:  # checked together by the caller
        regexes.append((value, pattern))
    return pattern


def tokens(expr: str) -> list[str]:
    """Whitespace-separated terms; quotes (' or ") group, backslashes are kept as typed."""
    out: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    started = False
    for ch in expr:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote, started = ch, True
        elif ch.isspace():
            if started:
                out.append("".join(cur))
            cur, started = [], False
        else:
            cur.append(ch)
            started = True
    if quote:
        raise FilterError(f"cannot read filter: no closing {quote}")
    if started:
        out.append("".join(cur))
    return out


SPACED_FIELD = re.compile(r"^-?[a-z]+$", re.IGNORECASE)
SPACED_FIELD_OP = re.compile(r"^-?[a-z]+\s*(<=|>=|==|!=|<|>|=)$", re.IGNORECASE)


def _joined(terms: list[str]) -> list[str]:
    """Terms typed with spaces inside (`dur > 1ms`, `dur >1ms`, `layer: attn`) as one term each:
    a comparison field followed by its operator, an operator followed by its value, a `field:`
    followed by its value."""
    out: list[str] = []
    for t in terms:
        if out:
            prev = out[-1]
            field = prev.lstrip("-").rstrip(":").lower()
            if (
                (SPACED_FIELD.match(prev) and field in NUMERIC and t[:1] in "<>=!")
                or SPACED_FIELD_OP.match(prev)
                or (prev.endswith(":") and field in {**TEXT_FIELDS, **INT_FIELDS})
            ):
                out[-1] = prev + t
                continue
        out.append(t)
    return out


def term(text: str, regexes: list[tuple[str, str]] | None = None) -> pl.Expr:
    neg = text.startswith("-") and len(text) > 1
    body = text[1:] if neg else text
    m = COMPARE.match(body)
    if m:
        field, op, num, unit = m["field"].lower(), m["op"], float(m["num"]), m["unit"].lower()
        if op == "=":  # one `=` reads as equality in some tools and assignment in others: say which exists
            raise FilterError(
                f"no operator '=' in {body!r}: comparisons are <, <=, >, >=, ==, != "
                f"(e.g. {field}=={m['num']}{m['unit']}, or {field}>={m['num']}{m['unit']})"
            )
        if field not in NUMERIC:
            raise FilterError(f"cannot compare {field!r} (numbers: {', '.join(NUMERIC)})")
        if unit:
            if field not in ("dur", "start") or unit not in UNITS:
                raise FilterError(f"unknown unit {unit!r} in {body!r} (times take ns, us, ms or s)")
            num *= UNITS[unit]
        col = pl.col(f"_{field}") if field in ("grid", "block") else pl.col(NUMERIC[field])
        e = {
            "<": col < num,
            "<=": col <= num,
            ">": col > num,
            ">=": col >= num,
            "=": col == num,
            "==": col == num,
            "!=": col != num,
        }[op]
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
            known = EXACT_FIELDS[field]
            if not any(k.startswith(value.lower()) for k in known):
                raise FilterError(f"{field}:{value} matches nothing ({field}: takes {', '.join(known)})")
            e = pl.col(TEXT_FIELDS[field]).str.to_lowercase().str.starts_with(value.lower())
        elif field == "layer":  # whole segments of the `:`-joined path: layer_1 is not layer_10
            _regex(value, regexes)  # the value alone must be a pattern
            e = pl.col("Layer").str.contains(f"(?i)(?:^|:)(?:{value})(?::|$)")
        else:
            e = pl.col(TEXT_FIELDS[field]).str.contains(_regex(value, regexes))
    elif re.match(r"^[a-z]+:", body, re.IGNORECASE) and not body.startswith(("http:", "std:")):
        raise FilterError(f"unknown field {body.split(':', 1)[0]!r} (fields: {FIELDS_HELP})")
    else:
        if re.match(r"^[a-z]+\s*(<|>|=)", body, re.IGNORECASE):
            raise FilterError(f"cannot read comparison {body!r} (e.g. dur>50us, grid>=1024)")
        e = pl.col("Kernel").str.contains(_regex(body, regexes))
    e = e.fill_null(False)
    return ~e if neg else e


def parse(expr: str) -> pl.Expr | None:
    """The whole expression as one polars predicate (None for an empty filter)."""
    regexes: list[tuple[str, str]] = []
    terms = [term(t, regexes) for t in _joined(tokens(expr))]
    _check(regexes)
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else pl.all_horizontal(terms)


def apply(frame: pl.DataFrame, expr: str) -> pl.DataFrame:
    pred = parse(expr)
    return frame if pred is None else frame.filter(pred)
