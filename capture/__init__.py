"""Capture: profile a program or a built-in workload under Nsight Systems or torch.profiler.

Public API for programs (imports torch only when used, so `kview capture --help` needs no torch):
    kview.capture.annotate(model, ...)   a range per submodule, named by its qualified path
    kview.capture.step()                 mark the end of a training step under `kview capture`
"""

from __future__ import annotations

__all__ = ["annotate", "step"]


def __getattr__(name: str):
    if name == "annotate":
        # deferred: torch, loaded only when a program calls it
        from kview.capture.module_ranges import annotate

        return annotate
    if name == "step":
        # deferred: torch, loaded only when a program calls it
        from kview.capture.session import step

        return step
    raise AttributeError(name)
