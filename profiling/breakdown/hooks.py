"""`Tracker`: which module, and which phase of the step, the work belongs to.

Attached to a model, it runs every module's forward (the model's included) inside one range
named by the module's full path (profiling.breakdown.names; the module's `forward` replaced by a
wrapper until `detach()`, cheaper than a pair of forward hooks), and registers on every parameter
a post-accumulate-grad hook that drops a `grad: <owner>` marker inside the AccumulateGrad that
just ran. A range is a profiler range, or with `stamps` (one process on the CPU) a pair of
wall-clock stamps kept in Python (`log`) that `events` turns into the same events after the steps
(profiling.breakdown.stamps: a stamp costs a fraction of a recorded profiler range).
`tracker.mark` is the step's `StepParts.mark`: it opens `phase: <name>` ranges around the phases
of the one `train_step`.

Backward work is tied to modules by the one rule of profiling.breakdown.owners, through
autograd's sequence numbers: every autograd node created in
forward takes the thread's next sequence number, and its backward (the profiler's
`autograd::engine::evaluate_function: <Node>` range, or `torch._C._current_autograd_node()` while it
runs) carries it. At every module entry and exit and every mark the tracker notes the next sequence number and the
innermost module (or the loss, between the model's output and `backward`), so `owner_of_seq(n)`
is the module that was innermost when node n was made. An in-place ReLU's node is made inside the
ReLU, so its backward is the ReLU's; torch's `ModuleTracker.parents`, which holds residual
siblings during backward (FlopCounterMode charges ResNet's downsample convolutions with their
siblings' backward: docs/breakdown.md), is not used.

With `nvtx=True` the same ranges are also NVTX push/pop ranges (profile mode under ncu:
`--nvtx-modules`). `detach()` (or leaving the `with` block) restores the modules and removes
the hooks.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from profiling.breakdown import names, stamps
from profiling.breakdown.events import Ev
from profiling.breakdown.owners import SeqOwners, backward_owner

_FORWARD_BASE = names.LOSS  # work in the forward phase outside the model: the loss
TICK_NS = 1_000_000  # the CPU clock's markers: at most about one per millisecond of wall time
_stamp_ns = time.time_ns  # CLOCK_REALTIME, the clock of kineto's host events (stamps.py)
_cpu_ns = time.thread_time_ns


def _nothing() -> None:
    pass


class Tracker:
    """Module ranges, phase marks and the sequence-number map of one model. See the module doc.

    `root` names the model itself (the model's name, e.g. "resnet18"). `ranges`: open profiler
    ranges (False for a counting pass, which only needs the owners); `nvtx`: NVTX ranges too;
    `grad_markers`: the AccumulateGrad markers; `user_scope`: ranges a profiler that records
    user scopes alone sees (`range_pair`); `cpu_clock`: `cpu: <ns>` markers of the thread's CPU
    clock (`tick`); `stamps`: module ranges and markers kept as wall-clock stamps in Python, not
    profiler ranges (profiling.breakdown.stamps; `events` merges them), the step and phase ranges
    staying profiler ranges.
    """

    def __init__(
        self,
        model,
        root: str,
        *,
        ranges: bool = True,
        nvtx: bool = False,
        grad_markers: bool = True,
        user_scope: bool = False,
        cpu_clock: bool = False,
        stamps: bool = False,
    ) -> None:
        import torch

        self.model = model
        self.cpu_clock = cpu_clock and ranges
        self._last_tick = [0]  # wall ns of the last CPU-clock marker (a cell the wrappers share)
        self.stamps = stamps and ranges and not nvtx
        self.log: list[tuple] = []
        """stamps mode: module entries and exits, grad and CPU-clock markers (profiling.breakdown.stamps)"""
        self.anchors: list[tuple[str, int]] = []
        """stamps mode: (step or phase range label, wall ns just before it opened): the clocks'
        offset (stamps.offset_ns)"""
        self.stamped: list[Ev] = []
        """stamps mode: the stamps as events, after `events`"""
        self.lost_grad_markers = 0
        """stamps mode: grad markers `events` matched to no AccumulateGrad"""
        self._open_range, self._close_range = range_pair(user_scope)
        self.root = root
        self.ranges = ranges
        self.nvtx = nvtx
        self.grad_markers = grad_markers
        self.stack: list[str] = []
        self.phase: str | None = None
        # private, in torch 2.11 to 2.14; without it no backward work has a module (owner_of_seq)
        self._seq: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
        self.seq_owners = SeqOwners()
        """sequence number -> the module that made the node (owners.SeqOwners)"""
        self._handles: list = []
        self._nodes: list = []  # AccumulateGrad nodes held while their NVTX hooks are on
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
            self._handles.append(_Unwrap(module, self._wrapped(name, module.forward)))
        if self.nvtx:
            self._grad_ranges()
        if self.grad_markers:
            for param in self.model.parameters():
                if param.requires_grad:
                    hook = self._grad_hook(self.param_owner[id(param)])
                    self._handles.append(param.register_post_accumulate_grad_hook(hook))
        return self

    def _grad_hook(self, owner: str) -> Callable:
        """The post-accumulate-grad hook that drops `grad: <owner>` inside the AccumulateGrad (and,
        on the CPU clock, a `cpu: <ns>` marker when a millisecond has passed: backward has no
        module calls to tick). With `stamps` it appends the stamp directly."""
        if not self.stamps:
            return lambda _p: self._grad_marker(owner)
        label = names.GRAD + owner
        tick = self._tick if self.cpu_clock else None
        last, now, log = self._last_tick, _stamp_ns, self.log

        def stamp(_param) -> None:
            if tick is not None and now() - last[0] >= TICK_NS:
                tick()
            log.append((now(), label, 0))

        return stamp

    def _grad_ranges(self) -> None:
        """NVTX only: a `grad: <owner>` range around every parameter's AccumulateGrad node, so
        that its kernels (which a profiler marker dropped after it cannot hold) are its module's
        (ncu.kernel_owner). The nodes are held: autograd makes a new one when none is."""
        import torch

        for param in self.model.parameters():
            if not param.requires_grad:
                continue
            try:
                node = param.view_as(param).grad_fn.next_functions[0][0]
            except (AttributeError, IndexError, RuntimeError):  # no accumulator to reach: its
                continue  # kernels stay unattributed backward, as before the ranges
            if node is None:
                continue
            label = names.GRAD + self.param_owner[id(param)]
            self._nodes.append(node)
            self._handles.append(
                node.register_prehook(lambda _g, lb=label: torch.cuda.nvtx.range_push(lb))
            )
            self._handles.append(node.register_hook(lambda _i, _o: torch.cuda.nvtx.range_pop()))

    def _wrapped(self, name: str, forward: Callable) -> Callable:
        """`forward` inside the module's range: the module innermost while it runs (an instance
        attribute, which nn.Module's call runs as it would the class's forward; forward hooks
        would add torch's hook dispatch, about 1.2 us of thread CPU per call here:
        docs/breakdown.md, Measures). With `stamps` the wrapper appends the stamps and keeps the
        sequence-number map inline: every call of every module pays for each step it takes
        (bench/breakdown_overhead.py measures it); else `_wrapped_general`."""
        if not self.stamps or self._seq is None:
            return self._wrapped_general(name, forward)
        label = names.module_range(name)
        stack, starts, owners = self.stack, self.seq_owners.starts, self.seq_owners.owners
        seq, log = self._seq, self.log
        tick = self._tick if self.cpu_clock else None
        last, now = self._last_tick, _stamp_ns
        tracker = self

        def run_stamped(*args, **kwargs):
            stack.append(name)
            starts.append(seq())
            owners.append(name)
            if tick is not None and now() - last[0] >= TICK_NS:
                tick()
            log.append((now(), label))
            try:
                return forward(*args, **kwargs)
            finally:
                t = now()
                log.append((t, None))
                stack.pop()
                starts.append(seq())  # _note, inline
                owners.append(
                    stack[-1] if stack else (_FORWARD_BASE if tracker.phase == "forward" else None)
                )
                if tick is not None and t - last[0] >= TICK_NS:
                    tick()

        return run_stamped

    def _wrapped_general(self, name: str, forward: Callable) -> Callable:
        """`_wrapped` with profiler ranges (CUDA, data parallel), NVTX ranges, or none (a
        counting pass), each through `_push` and `_pop`."""
        label = names.module_range(name)
        stack, starts, owners = self.stack, self.seq_owners.starts, self.seq_owners.owners
        seq = self._seq
        push, pop, note = self._push, self._pop, self._note
        tick = self._tick if self.cpu_clock else _nothing

        def run_in_range(*args, **kwargs):
            stack.append(name)
            if seq is not None:  # None: a torch without sequence numbers (__init__)
                starts.append(seq())
                owners.append(name)
            tick()
            handle = push(label)
            try:
                return forward(*args, **kwargs)
            finally:
                pop(handle)
                stack.pop()
                note()
                tick()

        return run_in_range

    def _tick(self, every_ns: int = TICK_NS) -> None:
        """A `cpu: <ns>` marker (the thread's CPU clock, read here) when `every_ns` of wall time
        have passed since the last one: reading the clock costs 2.7 us of thread CPU here (a
        system call), so it is read about once a millisecond, not at every module call. The
        marker's wall time is taken after the CPU clock is read, so a stretch between two markers
        never holds more CPU time than wall time."""
        now = _stamp_ns()
        if now - self._last_tick[0] >= every_ns:
            self._last_tick[0] = now
            label = names.CPU_CLOCK + str(_cpu_ns())
            if self.stamps:
                self.log.append((_stamp_ns(), label, 0))
            else:
                self._marker(label)

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._nodes.clear()

    def __enter__(self) -> "Tracker":
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    # ------------------------------------------------------------------ ranges
    def _push(self, label: str):
        """Open a range (profiler, NVTX or both); returns what `_pop` closes."""
        if self.nvtx:
            import torch

            torch.cuda.nvtx.range_push(label)
        return self._open_range(label) if self.ranges else None

    def _pop(self, handle) -> None:
        if handle is not None:
            self._close_range(handle)
        if self.nvtx:
            import torch

            torch.cuda.nvtx.range_pop()

    def _marker(self, label: str) -> None:
        self._pop(self._push(label))

    def _grad_marker(self, owner: str) -> None:
        if self.cpu_clock:
            self._tick()
        self._marker(names.GRAD + owner)

    def _note(self) -> None:
        """The next sequence number now belongs to the innermost module (or the phase's base)."""
        owner = (
            self.stack[-1] if self.stack else (_FORWARD_BASE if self.phase == "forward" else None)
        )
        if self._seq is not None:
            self.seq_owners.note(self._seq(), owner)

    @contextlib.contextmanager
    def mark(self, phase: str) -> Iterator[None]:
        """`StepParts.mark`: a `phase: <phase>` range; "forward" makes work outside the model the
        loss's."""
        outer = self.phase
        self.phase = phase
        self._note()
        try:
            with self.span(names.phase_range(phase)):
                yield
        finally:
            self.phase = outer
            self._note()

    @contextlib.contextmanager
    def span(self, label: str) -> Iterator[None]:
        """A range of the loop around the step (`step: i`, `phase: data`). In stamps mode the
        instant before it opens is kept (`anchors`): the offset between the stamps' clock and
        the profiler's."""
        self._edge()
        if self.stamps:
            self.anchors.append((label, _stamp_ns()))
        handle = self._push(label)
        try:
            yield
        finally:
            self._pop(handle)
            self._edge()

    def _edge(self) -> None:
        """The CPU clock at a phase's or step's edge, always (a few per step)."""
        if self.cpu_clock:
            self._tick(0)

    # ------------------------------------------------------------------ owners
    def owner_of_seq(self, seq: int) -> str | None:
        """The module (or `loss`) that was innermost when the autograd node numbered `seq` was
        made on the thread that ran forward; None when it was made outside the model and loss."""
        return self.seq_owners(seq)

    def current(self) -> tuple[str, str]:
        """(owner, phase) of the op running now, for a counting pass (profiling.breakdown.counts):
        inside backward, the running autograd node's owner (owners.backward_owner); else the
        innermost module (forward), the loss, the optimizer or the step's glue."""
        import torch

        # private, in torch 2.11 to 2.14; without it backward work is the phase's, unattributed
        node = getattr(torch._C, "_current_autograd_node", lambda: None)()
        if node is not None:
            var = getattr(node, "variable", None)  # an AccumulateGrad's parameter
            return backward_owner(
                seq=-1 if var is not None else node._sequence_nr(),
                accumulate_grad=var is not None,
                param_owner=self.param_owner.get(id(var)) if var is not None else None,
                owner_of_seq=self.seq_owners,
            ), "backward"
        if self.stack:
            return self.stack[-1], "forward"
        return phase_owner(self.phase)

    def clear(self) -> None:
        """Forget the sequence-number map (between steps; numbers keep growing) and the stamps."""
        self.seq_owners.clear()
        self.log.clear()
        self.anchors.clear()

    def events(self, recorded: list[Ev]) -> list[Ev]:
        """The profiler's events of the recorded steps with the Tracker's stamps among them, on
        the thread of the first step range (stamps.to_events); `recorded` as it is without
        stamps."""
        if not self.stamps or not self.log:
            return recorded
        steps = [e for e in recorded if e.name.startswith(names.STEP)]
        if not steps:
            return recorded
        thread = min(steps, key=lambda e: e.start_ns).thread
        offset = stamps.offset_ns(self.anchors, [e for e in recorded if e.thread == thread])
        self.stamped, self.lost_grad_markers = stamps.to_events(self.log, recorded, thread, offset)
        return recorded + self.stamped


def range_pair(user_scope: bool = False) -> tuple[Callable[[str], object], Callable]:
    """(open(label) -> handle, close(handle)): torch's cheapest profiler range of the scope asked.

    * `user_scope=False`: `_RecordFunctionFast` (0.2-0.3 us per enter and exit here, against 9-12
      us for record_function's op pair: bench/breakdown_overhead.py's range_costs), an op-scope
      range: a profiler that records ops records it;
    * `user_scope=True`: the user-scope pair behind record_function without its dispatcher ops
      (`_record_function_with_args_enter`, about 1 us), which a profiler recording user scopes and
      backward nodes alone (recording.py's host recording) still sees.

    Either falls back to `torch.autograd.profiler.record_function` (user scope) on a torch
    without them."""
    import torch

    auto = getattr(torch._C, "_autograd", None)
    enter = getattr(auto, "_record_function_with_args_enter", None)
    leave = getattr(auto, "_record_function_with_args_exit", None)
    if user_scope and enter is not None and leave is not None:
        return enter, leave
    fast = None if user_scope else getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if fast is None:
        from torch.autograd.profiler import record_function

        fast = record_function

    def open_(label: str):
        rf = fast(label)
        rf.__enter__()
        return rf

    def close(rf) -> None:
        rf.__exit__(None, None, None)

    return open_, close


class _Unwrap:
    """Puts a module's own forward back (`remove()`, as a hook handle does)."""

    def __init__(self, module, wrapped: Callable) -> None:
        self.module = module
        self.had = "forward" in vars(module)
        self.before = vars(module).get("forward")
        module.forward = wrapped

    def remove(self) -> None:
        if self.had:
            self.module.forward = self.before
        else:
            vars(self.module).pop("forward", None)


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
