"""Writing a Chrome trace-event document (analysis/chrome_trace.py makes its events): the
header, then the events' JSON texts in chunks, gzip'd when the file name ends in `.gz`."""

from __future__ import annotations

import gzip
import json
from typing import BinaryIO

from kview.analysis.chrome_trace import Export
from kview.output.visible import json_visible

CHUNK = 200_000  # events joined and written at a time (a million never become one string)


def write(export: Export, out: BinaryIO, other: dict, compress: bool, chunk: int = CHUNK) -> None:
    """The document into `out`: `{"schemaVersion", "deviceProperties", "otherData",
    "displayTimeUnit", "traceEvents": [...]}`; ts and dur are µs, as the format has them."""
    sink: BinaryIO = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=3, mtime=0) if compress else out  # type: ignore[assignment]
    head = {
        "schemaVersion": 1,
        "deviceProperties": export.devices,
        "otherData": other,
        "displayTimeUnit": "ms",
    }
    sink.write(json.dumps(head)[:-1].encode() + b', "traceEvents": [\n')
    first = True
    for part in export.parts:
        for text in part.texts(chunk):
            # names from the trace: DEL and C1 as \u escapes, as every JSON kview writes (visible.py)
            sink.write(json_visible(((",\n" if not first else "") + text).encode()))
            first = False
    sink.write(b"\n]}\n")
    if compress:
        sink.close()
