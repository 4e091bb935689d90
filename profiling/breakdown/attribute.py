"""Profiler events -> time per (module, phase) row and the step's parts. Pure: no torch needed.

Every host event gets an owner, the innermost of its own range and its ancestors' on its thread
that names one:

* `module: <path>` -> that module, phase forward;
* `autograd::engine::evaluate_function: <Node>` -> the module that made the node (its sequence
  number through `owner_of_seq`, the Tracker's map), phase backward; an AccumulateGrad -> the
  module named by the `grad: <path>` marker inside it (the parameter's owner);
* `phase: forward` -> the loss (forward work outside the model); `phase: optimizer` -> optimizer;
  `phase: data` -> data; `Optimizer.zero_grad#...` -> zero_grad; anything else ->
  `unattributed` (backward-engine work between nodes, the step's glue).

Time comes from one of two clocks (`time_source`):

* "host" (CPU training): the main thread's timeline inside each `step: i` range, cut into
  exclusive pieces: an event's own time is its duration less its children's, charged to its
  owner. The pieces of a step add up to the step's range exactly.
* "device" (CUDA training): each kernel, copy and memset is charged to the owner of the CPU op
  that launched it (correlation ids); the rest of the step's range, when the device ran nothing,
  is the row `device idle`.

The parts of the step (names.PARTS) are cut from the same timeline. Host: the durations of the
phase ranges (`optimizer` includes zero_grad), communication ranges (c10d, gloo, NCCL) moved from
the phase they sit in to `exposed_comm`, and `host_overhead` the rest of the step's range. Device:
each instant of the step's range is labelled by what the device ran then (compute kernels by
their phase first, then host-to-device copies, then communication kernels not hidden behind
compute: `exposed_comm`), else, with the device idle, `data_wait` while the host fetched the
batch and `host_overhead` otherwise. Either way the parts add up to the step's range.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from profiling.breakdown import names
from profiling.breakdown.events import CPU, MEMCPY, Ev
from profiling.breakdown.hooks import phase_owner

Key = tuple[str, str]  # (row, phase)
COMM_MARKERS = ("c10d::", "gloo", "nccl", "allreduce", "all_reduce", "record_param_comms")
_COMPUTE_PARTS = ("forward", "backward", "optimizer")
_PART_OF_PHASE = {"forward": "forward", "backward": "backward", "optimizer": "optimizer"}


@dataclass
class Attribution:
    """Means per recorded step, in seconds."""

    steps: int
    time_source: str
    """host | device"""
    self_s: dict[Key, float] = field(default_factory=dict)
    """(row, phase) -> the row's own time (children's not included)"""
    parts_s: dict[str, float] = field(default_factory=dict)
    step_window_s: list[float] = field(default_factory=list)
    """each recorded step's `step: i` range, seconds"""
    calls: dict[Key, float] = field(default_factory=dict)
    """(row, phase) -> ranges or nodes per step (module calls forward, autograd nodes backward)"""

    @property
    def window_mean_s(self) -> float:
        return sum(self.step_window_s) / len(self.step_window_s) if self.step_window_s else 0.0


def is_comm(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in COMM_MARKERS)


# ------------------------------------------------------------------------------ nesting
class _Tree:
    """Host events of every thread with their parents (per-thread nesting by time)."""

    def __init__(self, events: Iterable[Ev]) -> None:
        self.ev: list[Ev] = [e for e in events if e.kind == CPU]
        self.parent: list[int] = [-1] * len(self.ev)
        self.child_ns: list[int] = [0] * len(self.ev)
        by_thread: dict[int, list[int]] = defaultdict(list)
        for i, e in enumerate(self.ev):
            by_thread[e.thread].append(i)
        for idx in by_thread.values():
            idx.sort(key=lambda i: (self.ev[i].start_ns, -self.ev[i].end_ns))
            stack: list[int] = []
            for i in idx:
                e = self.ev[i]
                while stack and self.ev[stack[-1]].end_ns <= e.start_ns:
                    stack.pop()
                if stack:
                    p = stack[-1]
                    self.parent[i] = p
                    self.child_ns[p] += min(e.end_ns, self.ev[p].end_ns) - e.start_ns
                stack.append(i)
        self.order = sorted(
            range(len(self.ev)), key=lambda i: (self.ev[i].start_ns, -self.ev[i].end_ns)
        )

    def self_ns(self, i: int) -> int:
        return max(0, self.ev[i].duration_ns - self.child_ns[i])

    def ancestors(self, i: int):
        p = self.parent[i]
        while p >= 0:
            yield p
            p = self.parent[p]


def _owners(tree: _Tree, owner_of_seq: Callable[[int], str | None], main_thread: int) -> list[Key]:
    """The owner (row, phase) of every host event (see the module docstring)."""
    acc_owner: dict[int, str] = {}
    for i, e in enumerate(tree.ev):
        if e.name.startswith(names.GRAD):
            for a in tree.ancestors(i):
                if tree.ev[a].name.startswith(names.EVALUATE):
                    acc_owner[a] = e.name[len(names.GRAD) :]
                    break
    owner: list[Key | None] = [None] * len(tree.ev)
    for i in tree.order:  # parents before children
        e = tree.ev[i]
        own = _own(e, i, acc_owner, owner_of_seq, main_thread)
        if own is None:
            p = tree.parent[i]
            own = owner[p] if p >= 0 else (names.UNATTRIBUTED, "other")
        owner[i] = own
    return owner  # type: ignore[return-value]


def _own(e: Ev, i: int, acc_owner, owner_of_seq, main_thread) -> Key | None:
    name = e.name
    if name.startswith(names.MODULE):
        return name[len(names.MODULE) :], "forward"
    if name.startswith(names.EVALUATE):
        if names.ACCUMULATE_GRAD in name:
            return acc_owner.get(i, names.UNATTRIBUTED), "backward"
        if e.seq >= 0 and e.fwd_thread in (0, main_thread):
            return owner_of_seq(e.seq) or names.UNATTRIBUTED, "backward"
        return names.UNATTRIBUTED, "backward"
    if name.startswith(names.PHASE):
        return phase_owner(name[len(names.PHASE) :])
    if name.startswith(names.ZERO_GRAD_PREFIX):
        return names.ZERO_GRAD, "other"
    if name.startswith(names.STEP):
        return names.UNATTRIBUTED, "other"
    return None


def _steps(tree: _Tree) -> list[int]:
    return sorted(
        (i for i, e in enumerate(tree.ev) if e.name.startswith(names.STEP)),
        key=lambda i: tree.ev[i].start_ns,
    )


def _in_step(tree: _Tree, i: int, steps: set[int]) -> int:
    """The step range event `i` lies in (-1: none)."""
    if i in steps:
        return i
    for a in tree.ancestors(i):
        if a in steps:
            return a
    return -1


# ------------------------------------------------------------------------------ attribution
def attribute(
    events: Iterable[Ev],
    owner_of_seq: Callable[[int], str | None],
    time_source: str = "host",
) -> Attribution:
    """Time per (row, phase) and the step's parts, means over the `step: i` ranges found.

    `owner_of_seq(n)`: the module that made autograd node n (hooks.Tracker.owner_of_seq), None
    when unknown. `time_source`: "host" (CPU training) or "device" (CUDA: kernel time).
    Raises ValueError when the events hold no step range.
    """
    events = list(events)
    tree = _Tree(events)
    step_idx = _steps(tree)
    if not step_idx:
        raise ValueError("no `step: i` range among the profiler's events: nothing was recorded")
    main_thread = tree.ev[step_idx[0]].thread
    owner = _owners(tree, owner_of_seq, main_thread)
    out = Attribution(steps=len(step_idx), time_source=time_source)
    out.step_window_s = [tree.ev[i].duration_ns / 1e9 for i in step_idx]
    n = len(step_idx)
    _count_calls(tree, owner, set(step_idx), out, n)
    if time_source == "host":
        _host_times(tree, owner, set(step_idx), out, n)
    elif time_source == "device":
        _device_times(tree, owner, step_idx, events, out, n)
    else:
        raise ValueError(f"time_source must be host or device, got {time_source!r}")
    return out


def _count_calls(tree: _Tree, owner: list[Key], steps: set[int], out: Attribution, n: int) -> None:
    calls: dict[Key, float] = defaultdict(float)
    for i, e in enumerate(tree.ev):
        if (e.name.startswith(names.MODULE) or e.name.startswith(names.EVALUATE)) and _in_step(
            tree, i, steps
        ) >= 0:
            calls[owner[i]] += 1 / n
    out.calls = dict(calls)


def _host_times(tree: _Tree, owner: list[Key], steps: set[int], out: Attribution, n: int) -> None:
    self_ns: dict[Key, int] = defaultdict(int)
    parts_ns: dict[str, int] = defaultdict(int)
    comm_top: set[int] = set()
    for i in tree.order:  # parents before children
        e = tree.ev[i]
        s = _in_step(tree, i, steps)
        if s < 0:
            continue
        self_ns[owner[i]] += tree.self_ns(i)
        name = e.name
        if name.startswith(names.PHASE):
            phase = name[len(names.PHASE) :]
            if phase in _PART_OF_PHASE:
                parts_ns[_PART_OF_PHASE[phase]] += e.duration_ns
            elif phase == "data":
                parts_ns["data_wait"] += e.duration_ns
        elif name.startswith(names.ZERO_GRAD_PREFIX):
            parts_ns["optimizer"] += e.duration_ns
        elif is_comm(name) and not any(a in comm_top for a in tree.ancestors(i)):
            comm_top.add(i)
            parts_ns["exposed_comm"] += e.duration_ns
            enclosing = next(
                (
                    tree.ev[a].name[len(names.PHASE) :]
                    for a in tree.ancestors(i)
                    if tree.ev[a].name.startswith(names.PHASE)
                ),
                "",
            )
            part = _PART_OF_PHASE.get(enclosing, "data_wait" if enclosing == "data" else "")
            if part:
                parts_ns[part] -= e.duration_ns
    total = sum(tree.ev[s].duration_ns for s in steps)
    parts_ns["host_overhead"] = total - sum(parts_ns.values())
    out.self_s = {k: v / n / 1e9 for k, v in self_ns.items()}
    out.parts_s = {p: parts_ns.get(p, 0) / n / 1e9 for p in names.PARTS}


def _device_times(
    tree: _Tree, owner: list[Key], step_idx: list[int], events: list[Ev], out: Attribution, n: int
) -> None:
    corr_owner: dict[int, Key] = {}
    for i, e in enumerate(tree.ev):
        if e.corr:
            corr_owner[e.corr] = owner[i]
    device = sorted((e for e in events if e.on_device), key=lambda e: e.start_ns)
    data_ranges = [
        (e.start_ns, e.end_ns)
        for e in tree.ev
        if e.name == names.phase_range("data") and e.thread == tree.ev[step_idx[0]].thread
    ]
    self_ns: dict[Key, int] = defaultdict(int)
    parts_ns: dict[str, int] = defaultdict(int)
    for s in step_idx:
        w0, w1 = tree.ev[s].start_ns, tree.ev[s].end_ns
        spans: list[tuple[int, int, str]] = []
        for e in device:
            a, b = max(e.start_ns, w0), min(e.end_ns, w1)
            if b <= a:
                continue
            key = corr_owner.get(e.linked_corr, (names.UNATTRIBUTED, "other"))
            self_ns[key] += b - a
            spans.append((a, b, _device_label(e, key)))
        busy, by_label = _sweep(spans, w0, w1, data_ranges)
        self_ns[(names.IDLE, "other")] += (w1 - w0) - busy
        for label, ns in by_label.items():
            parts_ns[label] += ns
    out.self_s = {k: v / n / 1e9 for k, v in self_ns.items()}
    out.parts_s = {p: parts_ns.get(p, 0) / n / 1e9 for p in names.PARTS}


def _device_label(e: Ev, key: Key) -> str:
    if is_comm(e.name):
        return "exposed_comm"
    if e.kind == MEMCPY and "htod" in e.name.lower().replace(" ", "").replace("-", ""):
        return "h2d_copy"
    phase = key[1]
    if phase in _PART_OF_PHASE:
        return _PART_OF_PHASE[phase]
    if phase == "data":
        return "h2d_copy"
    return "optimizer"  # zero_grad and the step's glue: the optimizer's calls


_PRIORITY = ("forward", "backward", "optimizer", "h2d_copy", "exposed_comm")


def _sweep(
    spans: list[tuple[int, int, str]], w0: int, w1: int, data_ranges: list[tuple[int, int]]
) -> tuple[int, dict[str, int]]:
    """Label every instant of [w0, w1): the highest-priority device activity then; idle instants
    are data_wait inside a `phase: data` range, else host_overhead. Returns (busy ns, ns per
    part)."""
    cuts: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for a, b, label in spans:
        cuts[a].append((label, 1))
        cuts[b].append((label, -1))
    for a, b in data_ranges:
        a, b = max(a, w0), min(b, w1)
        if b > a:
            cuts[a].append(("_data", 1))
            cuts[b].append(("_data", -1))
    cuts.setdefault(w0, [])
    cuts.setdefault(w1, [])
    active: dict[str, int] = defaultdict(int)
    out: dict[str, int] = defaultdict(int)
    busy = 0
    points = sorted(cuts)
    for t0, t1 in zip(points, points[1:]):
        for label, d in cuts[t0]:
            active[label] += d
        if t1 <= w0 or t0 >= w1:
            continue
        width = t1 - t0
        label = next((p for p in _PRIORITY if active[p] > 0), None)
        if label is not None:
            busy += width
        else:
            label = "data_wait" if active["_data"] > 0 else "host_overhead"
        out[label] += width
    return busy, dict(out)
