"""One annotation helper for both capture backends.

Under torch.profiler (Kineto) a range must be a ``record_function`` to appear in the trace;
under Nsight Systems it must be an NVTX range. When nsys runs with ``--pytorch=autograd-nvtx``
every ``record_function`` is re-emitted as NVTX with an ``op_id`` suffix, so emitting both
would duplicate the range under a different name. The helper therefore asks torch which
profiler is active and emits exactly one of the two.

NVTX goes through ``torch.cuda.nvtx`` (plain ASCII ``text`` ranges in the default domain, as
in the seed reports, shipped with every CUDA build of torch). The ``nvtx`` package is used
instead when torch's NVTX binding is unavailable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


def _profiler_is_kineto() -> bool:
    try:
        ptype = torch._C._autograd._profiler_type()
    except AttributeError:  # very old torch: fall back to "profiler enabled"
        return bool(torch.autograd._profiler_enabled())
    return ptype.name == "KINETO"


def _nvtx_push_pop() -> tuple[Callable[[str], object], Callable[[], object]] | None:
    if torch.cuda.is_available():
        try:
            torch.cuda.nvtx.range_push("kview")
            torch.cuda.nvtx.range_pop()
            return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        except Exception:
            pass
    try:
        import nvtx  # type: ignore

        return nvtx.push_range, nvtx.pop_range
    except Exception:
        return None


_NVTX = None
_NVTX_CHECKED = False
_ALSO_RECORD_FUNCTION = False


def also_record_functions(on: bool) -> None:
    """Make every range a record_function too, outside a profiler (`kview bench --memory-snapshot`:
    the allocator history keeps record_function ranges as its annotations, so the phases show on
    the memory timeline without a trace). Never under nsys: it would re-emit them as NVTX."""
    global _ALSO_RECORD_FUNCTION
    _ALSO_RECORD_FUNCTION = on


def _nvtx():
    global _NVTX, _NVTX_CHECKED
    if not _NVTX_CHECKED:
        _NVTX = _nvtx_push_pop()
        _NVTX_CHECKED = True
    return _NVTX


@contextlib.contextmanager
def annotate(name: str) -> Iterator[None]:
    """A named range visible to nsys (NVTX) or to torch.profiler (record_function)."""
    if _profiler_is_kineto():
        with torch.profiler.record_function(name):
            yield
        return
    if _ALSO_RECORD_FUNCTION:
        with torch.profiler.record_function(name):
            yield
        return
    funcs = _nvtx()
    if funcs is None:
        yield
        return
    push, pop = funcs
    push(name)
    try:
        yield
    finally:
        pop()
