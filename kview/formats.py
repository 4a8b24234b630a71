"""The document formats every command writes, by name: no polars here, so the command line's
parser (and `kview --help`) is built without importing the table library."""

from __future__ import annotations

FORMATS = ("table", "csv", "tsv", "md", "json")
EXTENSIONS = {"table": "txt", "csv": "csv", "tsv": "tsv", "md": "md", "json": "json"}
# the data formats carry kview's `-` (a missing text value) as missing: null in JSON, empty in CSV/TSV
DATA_FORMATS = ("csv", "tsv", "json")
# formats that hold several titled tables in one document; CSV and TSV hold exactly one table
MULTI_TABLE_FORMATS = ("table", "md", "json")
