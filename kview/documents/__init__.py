"""Documents: what a command prints and a view shows, made once for both.

Each viewing command and each explorer view asks one function here for a `Document`: its titled
tables (polars frames), the notes that go with them and the equivalent command line. The CLI
renders a Document as a table, Markdown, CSV, TSV or JSON (kview.output.render.render_document);
the explorer renders the same Document into widgets. Neither assembles tables of its own, so
what the screen shows and what `kview COMMAND` prints cannot drift apart.

Dependencies: analysis and reports below, nothing of the CLI or the explorer above.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kview.formats import DATA_FORMATS


@dataclass(frozen=True)
class Section:
    """One titled table of a document. `name` is what `--table NAME` picks (and how code finds
    it); `title` heads it in the document (JSON keys it by the title)."""

    name: str
    title: str
    frame: pl.DataFrame
    # what a data format (CSV, TSV, JSON) carries instead of `frame`, when a person reads the
    # figures with their units and a program wants numbers (the memory summary)
    data: pl.DataFrame | None = None
    # what a terminal table shows instead of `frame` (a bar beside the figures, fewer columns)
    terminal: pl.DataFrame | None = None
    # the formats whose whole document holds this section (None: every one); `--table NAME`
    # gives it in any format
    formats: tuple[str, ...] | None = None
    # a list of sentences, shown as bullets to a person (the overview's findings)
    bullets: bool = False
    # a picture (text) a terminal table shows, and Markdown in a code block, instead of the
    # frame, the numbers behind it (the timeline)
    picture: str | None = None
    # the columns a reader sees (None: every one); the rest help a view (ids, a first instance)
    columns: tuple[str, ...] | None = None

    def frame_for(self, fmt: str) -> pl.DataFrame:
        """What a document in `fmt` shows of this section."""
        if fmt == "table" and self.terminal is not None:
            return self.terminal
        if self.data is not None and fmt in DATA_FORMATS:
            return self.data
        return self.frame if self.columns is None else self.frame.select(self.columns)

    def in_whole(self, fmt: str) -> bool:
        return self.formats is None or fmt in self.formats


@dataclass(frozen=True)
class Document:
    """What one command prints and one view shows: its sections in order, the notes said with
    them (stderr in the CLI, a caption in the explorer), and the command line that prints it."""

    title: str
    sections: tuple[Section, ...] = ()
    notes: tuple[str, ...] = ()
    command: str = ""
    # what an empty table reads as ("(none)"); None leaves empty tables out
    empty: str | None = None
    # said after each title where a person reads it (a terminal table, Markdown; not a JSON key)
    suffix: str = ""
    # the formats that still write a table without rows (its header, `[]`) when the document
    # is that one table (`--table NAME`, or its only one); in the others nothing is written.
    # None: every format
    written_empty: tuple[str, ...] | None = None

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(name)

    def frame(self, name: str) -> pl.DataFrame:
        return self.section(name).frame

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.sections)

    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sections)


def facts_table(facts: list[tuple[str, str]]) -> pl.DataFrame:
    """Facts (name, value in words) as a two-column table: the name column has no title."""
    return pl.DataFrame({"": [k for k, _ in facts], "value": [v for _, v in facts]})


def sentences(title: str, lines: list[str]) -> pl.DataFrame:
    """A list of sentences as a one-column table."""
    return pl.DataFrame({title: lines})
