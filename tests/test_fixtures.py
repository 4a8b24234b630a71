"""The public traces the suite needs are part of the repository, listed with their sources."""

from __future__ import annotations

import re

from conftest import FIXTURES, GOLDEN_PUBLIC, KINETO_NAMES, PUBLIC_NAMES, PUBLIC_TRACES, ROOT


def test_every_listed_fixture_is_in_the_repository():
    nsys = sorted(p.name.removesuffix(".xz") for p in (FIXTURES / "nsys").glob("*.sqlite.xz"))
    kineto = sorted(p.name for p in (FIXTURES / "kineto").iterdir() if p.name != "SOURCES.txt")
    assert sorted(PUBLIC_NAMES) == nsys and len(nsys) == 5
    assert sorted(KINETO_NAMES) == kineto and len(kineto) == 15
    for p in PUBLIC_TRACES:  # decompressed for this session: real SQLite files
        assert p.read_bytes()[:16] == b"SQLite format 3\x00", p
    assert sorted(GOLDEN_PUBLIC.glob("*.csv.xz"))


def test_no_test_reads_outside_the_repository():
    for p in (ROOT / "tests").glob("*.py"):
        text = p.read_text()
        assert not re.search(r"""["'/]shared["'/]|\.\./shared|\.parent / "shared\"""", text), p.name
