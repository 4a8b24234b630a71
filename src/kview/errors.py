"""The one error type the CLI turns into a single stderr line and exit status 2."""
from __future__ import annotations


class TraceError(Exception):
    """A trace that cannot be read: names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
