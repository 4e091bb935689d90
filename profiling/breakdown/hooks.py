"""`Tracker`: which module, and which phase of the step, the work belongs to.

Attached to a model, it registers on every module (the model included) a forward pre-hook and a
forward hook that open and close one profiler range named by the module's full path
(profiling.breakdown.names), and, on every parameter, a post-accumulate-grad hook that drops a
`grad: <owner>` marker inside the AccumulateGrad that just ran. `tracker.mark` is the step's
`StepParts.mark`: it opens `phase: <name>` ranges around the phases of the one `train_step`.

Backward work is tied to modules by autograd's sequence numbers: every autograd node created in
forward takes the thread's next sequence number, and its backward (the profiler's
`autograd::engine::evaluate_function: <Node>` range, or `torch._C._current_autograd_node()` while it
runs) carries it. At every hook and mark the tracker notes the next sequence number and the
innermost module (or the loss, between the model's output and `backward`), so `owner_of_seq(n)`
is the module that was innermost when node n was made. An in-place ReLU's node is made inside the
ReLU, so its backward is the ReLU's; torch's `ModuleTracker.parents`, which holds residual
siblings during backward (FlopCounterMode charges ResNet's downsample convolutions with their
siblings' backward: docs/breakdown.md), is not used.

With `nvtx=True` the same ranges are also NVTX push/pop ranges (profile mode under ncu:
`--nvtx-modules`). Hooks are removed by `detach()` (or leaving the `with` block).
"""

from __future__ import annotations

import bisect
import contextlib
from typing import Callable, Iterator

from profiling.breakdown import names

_FORWARD_BASE = names.LOSS  # work in the forward phase outside the model: the loss


class Tracker:
    """Module ranges, phase marks and the sequence-number map of one model. See the module doc.

    `root` names the model itself (the model's name, e.g. "resnet18"). `ranges`: open profiler
    ranges (False for a counting pass, which only needs the owners); `nvtx`: NVTX ranges too;
    `grad_markers`: the AccumulateGrad markers.
    """

    def __init__(
        self,
        model,
        root: str,
        *,
        ranges: bool = True,
        nvtx: bool = False,
        grad_markers: bool = True,
    ) -> None:
        import torch

        self.model = model
        self.root = root
        self.ranges = ranges
        self.nvtx = nvtx
        self.grad_markers = grad_markers
        self.stack: list[str] = []
        self.phase: str | None = None
        # private, in torch 2.11 to 2.14; without it no backward work has a module (owner_of_seq)
        self._seq: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
        self._starts: list[int] = []
        self._owners: list[str | None] = []
        self._handles: list = []
        self._open: list = []
        self.paths: dict[str, object] = {}
        """module path (the model itself: `root`) -> module"""
        self.leaves: set[str] = set()
        self.param_owner: dict[int, str] = {}
        """id(parameter) -> path of the module that owns it"""
        for path, module in model.named_modules():
            name = path or root
            self.paths[name] = module
            if not any(True for _ in module.children()):
                self.leaves.add(name)
        for path, param in model.named_parameters():
            owner = path.rsplit(".", 1)[0] if "." in path else root
            self.param_owner.setdefault(id(param), owner)

    # ------------------------------------------------------------------ attach / detach
    def attach(self) -> "Tracker":
        for name, module in self.paths.items():
            self._handles.append(
                module.register_forward_pre_hook(lambda _m, _i, n=name: self._enter(n))
            )
            self._handles.append(
                module.register_forward_hook(
                    lambda _m, _i, _o, n=name: self._exit(), always_call=True
                )
            )
        if self.grad_markers:
            for param in self.model.parameters():
                if param.requires_grad:
                    owner = self.param_owner[id(param)]
                    self._handles.append(
                        param.register_post_accumulate_grad_hook(
                            lambda _p, o=owner: self._marker(names.GRAD + o)
                        )
                    )
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> "Tracker":
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    # ------------------------------------------------------------------ ranges
    def _push(self, label: str) -> None:
        if self.ranges:
            rf = _range(label)
            rf.__enter__()
            self._open.append(rf)
        if self.nvtx:
            import torch

            torch.cuda.nvtx.range_push(label)

    def _pop(self) -> None:
        if self.nvtx:
            import torch

            torch.cuda.nvtx.range_pop()
        if self.ranges and self._open:
            self._open.pop().__exit__(None, None, None)

    def _marker(self, label: str) -> None:
        self._push(label)
        self._pop()

    def _note(self) -> None:
        """The next sequence number now belongs to the innermost module (or the phase's base)."""
        owner = (
            self.stack[-1] if self.stack else (_FORWARD_BASE if self.phase == "forward" else None)
        )
        if self._seq is not None:
            self._starts.append(self._seq())
            self._owners.append(owner)

    def _enter(self, path: str) -> None:
        self.stack.append(path)
        self._note()
        self._push(names.module_range(path))

    def _exit(self) -> None:
        self._pop()
        if self.stack:
            self.stack.pop()
        self._note()

    @contextlib.contextmanager
    def mark(self, phase: str) -> Iterator[None]:
        """`StepParts.mark`: a `phase: <phase>` range; "forward" makes work outside the model the
        loss's."""
        outer = self.phase
        self.phase = phase
        self._note()
        self._push(names.phase_range(phase))
        try:
            yield
        finally:
            self._pop()
            self.phase = outer
            self._note()

    @contextlib.contextmanager
    def span(self, label: str) -> Iterator[None]:
        """A range of the loop around the step (`step: i`, `phase: data`)."""
        self._push(label)
        try:
            yield
        finally:
            self._pop()

    # ------------------------------------------------------------------ owners
    def owner_of_seq(self, seq: int) -> str | None:
        """The module (or `loss`) that was innermost when the autograd node numbered `seq` was
        made on the thread that ran forward; None when it was made outside the model and loss."""
        i = bisect.bisect_right(self._starts, seq) - 1
        return self._owners[i] if i >= 0 else None

    def current(self) -> tuple[str, str]:
        """(owner, phase) of the op running now, for a counting pass (profiling.breakdown.counts):
        inside backward, the running autograd node's module (AccumulateGrad: its parameter's);
        else the innermost module (forward), the loss, the optimizer or the step's glue."""
        import torch

        # private, in torch 2.11 to 2.14; without it backward work is the phase's, unattributed
        node = getattr(torch._C, "_current_autograd_node", lambda: None)()
        if node is not None:
            var = getattr(node, "variable", None)
            if var is not None:
                return self.param_owner.get(id(var), names.UNATTRIBUTED), "backward"
            return self.owner_of_seq(node._sequence_nr()) or names.UNATTRIBUTED, "backward"
        if self.stack:
            return self.stack[-1], "forward"
        return phase_owner(self.phase)

    def clear(self) -> None:
        """Forget the sequence-number map (between steps; numbers keep growing)."""
        self._starts.clear()
        self._owners.clear()


def _range_class():
    """torch's cheapest profiler range: `_RecordFunctionFast` (0.25 us per enter and exit here,
    against 12 us for record_function's op pair: bench/breakdown_overhead.py's range_costs), else
    `torch.autograd.profiler.record_function`."""
    try:
        from torch._C._profiler import _RecordFunctionFast

        return _RecordFunctionFast
    except ImportError:  # another torch: the public range
        from torch.autograd.profiler import record_function

        return record_function


_range_cls = None


def _range(label: str):
    global _range_cls
    if _range_cls is None:
        _range_cls = _range_class()
    return _range_cls(label)


def phase_owner(phase: str | None) -> tuple[str, str]:
    """(row, phase column) of work inside `phase: <phase>` that no module or node owns."""
    if phase == "forward":
        return names.LOSS, "forward"
    if phase == "backward":
        return names.UNATTRIBUTED, "backward"
    if phase == "optimizer":
        return names.OPTIMIZER, "optimizer"
    if phase == "data":
        return names.DATA, "data"
    return names.UNATTRIBUTED, "other"
