"""One range per module call, named by the module's qualified path, without touching the model.

`annotate(model)` adds forward pre/post hooks to a model; `install_global()` (what `kview
capture --annotate` uses) adds them to every module through torch's global module hooks. A range
is an NVTX push/pop under Nsight Systems and a `record_function` under torch.profiler, so the
Layer column of kview names the module that launched each kernel (`layers.3.self_attn.q_proj`).

A module first seen outside any named model is a root: its range is its class name
(`ResNet`, `CrossEntropyLoss`) and its submodules are named by their path below it, as
`named_modules()` spells it. Hooks return None: a forward pre-hook that returned the push's
value would replace the module's input.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Selection:
    """Which modules get a range: depth 0 is the root, 1 its children ...; include/exclude are
    regular expressions searched in the qualified path and the class name; types are class names."""

    depth: int | None = None
    include: str | None = None
    exclude: str | None = None
    types: tuple[str, ...] = ()

    def wants(self, path: str, depth: int, cls: str) -> bool:
        if self.depth is not None and depth > self.depth:
            return False
        if self.types and cls not in self.types:
            return False
        if self.include and not (re.search(self.include, path) or re.search(self.include, cls)):
            return False
        if self.exclude and (re.search(self.exclude, path) or re.search(self.exclude, cls)):
            return False
        return True


def nvtx_ranges() -> tuple[Callable[[str], object], Callable[[object], None]]:
    """Push/pop through torch's NVTX binding (the seed reports' plain-text ranges)."""
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return push, (lambda _token: pop())


def profiler_ranges() -> tuple[Callable[[str], object], Callable[[object], None]]:
    """record_function ranges, the only user ranges torch.profiler records (through the ops that
    `record_function` itself calls, so a capture session's count of the program's ranges skips them)."""
    enter, exit_ = torch.ops.profiler._record_function_enter_new, torch.ops.profiler._record_function_exit

    return (lambda name: enter(name, None)), (lambda handle: exit_._RecordFunction(handle))


def default_ranges() -> tuple[Callable[[str], object], Callable[[object], None]]:
    """NVTX when torch has a CUDA build with NVTX, else record_function."""
    if torch.cuda.is_available():
        try:
            torch.cuda.nvtx.range_push("kview")
            torch.cuda.nvtx.range_pop()
            return nvtx_ranges()
        except Exception:  # CUDA build without NVTX support
            pass
    return profiler_ranges()


class ModuleRanges:
    """Names modules on first sight and opens/closes their ranges from forward hooks."""

    def __init__(
        self,
        select: Selection,
        ranges=None,
        active: Callable[[], bool] | None = None,
        first: Callable[[], None] | None = None,
    ):
        self.select = select
        self.push, self.pop = ranges or default_ranges()
        self.active = active or (lambda: True)
        self.first = first  # called before each module's range opens (a capture session's step start)
        self.names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self.local = threading.local()
        self.handles: list = []

    def name_tree(self, root: nn.Module) -> None:
        """Name `root` (by its class) and every submodule not named yet, by its path below the
        root ("" = no range for that module)."""
        cls = type(root).__name__
        if root not in self.names:
            self.names[root] = cls if self.select.wants(cls, 0, cls) else ""
        for path, sub in root.named_modules():
            if sub is root or sub in self.names:
                continue
            self.names[sub] = path if self.select.wants(path, path.count(".") + 1, type(sub).__name__) else ""

    def pre(self, module: nn.Module, *_args) -> None:
        if self.first is not None:
            self.first()
        name = self.names.get(module)
        if name is None:
            self.name_tree(module)
            name = self.names.get(module, "")
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        stack.append(self.push(name) if name and self.active() else None)
        return None

    def post(self, _module: nn.Module, *_args) -> None:
        stack = getattr(self.local, "stack", None)
        if stack:
            token = stack.pop()
            if token is not None:
                self.pop(token)
        return None

    def install_global(self) -> ModuleRanges:
        from torch.nn.modules import module as M

        self.handles = [
            M.register_module_forward_pre_hook(self.pre),
            M.register_module_forward_hook(self.post, always_call=True),
        ]
        return self

    def install_on(self, modules: Iterable[nn.Module]) -> ModuleRanges:
        for m in modules:
            self.handles += [
                m.register_forward_pre_hook(self.pre),
                m.register_forward_hook(self.post, always_call=True),
            ]
        return self

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def annotate(
    model: nn.Module,
    *,
    depth: int | None = None,
    include: str | None = None,
    exclude: str | None = None,
    types: Iterable[str] = (),
    name: str | None = None,
    ranges=None,
) -> ModuleRanges:
    """Give every submodule of `model` a range named by its qualified path while it runs forward.

    `depth` limits how deep (0: the model only, 1: its children, ...); `include`/`exclude` are
    regular expressions matched against the path and the class name; `types` keeps only modules
    of these class names; `name` names the model's own range (default: its class name).
    Returns the hooks' owner: `.remove()` takes them off again.
    """
    mr = ModuleRanges(Selection(depth, include, exclude, tuple(types)), ranges)
    cls = type(model).__name__
    mr.names[model] = (name or cls) if mr.select.wants(name or cls, 0, cls) else ""
    mr.name_tree(model)
    return mr.install_on(model.modules())
