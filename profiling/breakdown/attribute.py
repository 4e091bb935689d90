"""Profiler events -> time per (module, phase) row and the step's parts. Pure: no torch needed.

Every host event gets an owner, the innermost of its own range and its ancestors' on its thread
that names one (backward work by the one rule, profiling.breakdown.owners):

* `module: <path>` -> that module, phase forward;
* a backward node (`autograd::engine::evaluate_function: <Node>`, or `<Node>` itself when the
  profiler recorded user scopes and backward nodes alone: `is_node`) -> the module that made the
  node (its sequence number through `owner_of_seq`, the Tracker's map), phase backward; an
  AccumulateGrad -> the module named by the `grad: <path>` marker inside it (the parameter's
  owner);
* `phase: forward` -> the loss (forward work outside the model); `phase: optimizer` -> optimizer;
  `phase: data` -> data; `Optimizer.zero_grad#...` -> zero_grad; anything else ->
  `unattributed` (backward-engine work between nodes, the step's glue).

Time comes from one of two clocks (`time_source`):

* "host" (CPU training): the main thread's timeline inside each `step: i` range, cut into
  exclusive pieces: an event's own time is its duration less its children's, charged to its
  owner. The pieces of a step add up to the step's range exactly. Where the Tracker left
  `cpu: <ns>` markers (one process on the CPU), the same pieces are also timed by the main
  thread's CPU clock (`cpu_clock`), which a preempted thread does not advance: `cpu_self_s`.
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

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from profiling.breakdown import names
from profiling.breakdown.events import CPU, MEMCPY, Ev
from profiling.breakdown.hooks import phase_owner
from profiling.breakdown.owners import backward_owner

Key = tuple[str, str]  # (row, phase)
# collectives and DDP's gradient-bucket machinery (`torch.distributed.ddp.reducer::...`)
COMM_MARKERS = (
    "c10d::",
    "gloo",
    "nccl",
    "allreduce",
    "all_reduce",
    "record_param_comms",
    "ddp.reducer",
)
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
    cpu_self_s: dict[Key, float] = field(default_factory=dict)
    """host, with CPU clock markers: (row, phase) -> its own time by the main thread's CPU clock
    (`cpu_clock`); empty without markers"""
    step_cpu_s: list[float] = field(default_factory=list)
    """each recorded step's range by the main thread's CPU clock (empty without markers)"""
    parts_cpu_s: dict[str, float] = field(default_factory=dict)
    """the step's parts (`parts_s`) by the main thread's CPU clock (empty without markers): what
    the parts' shares are of when the rows' shares are by that clock (`share_clock`)"""

    @property
    def share_clock(self) -> str:
        """The clock the rows' shares use: `thread_cpu` when the CPU clock was read, else `wall`."""
        return "thread_cpu" if self.cpu_self_s and sum(self.step_cpu_s) > 0 else "wall"


def is_comm(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in COMM_MARKERS)


def is_node(e: Ev) -> bool:
    """Whether a host event is a backward node: the engine's `evaluate_function: <Node>` range, or
    the node's own (`<Node>`, carrying its sequence number and forward thread; the only one a
    profiler recording user scopes and backward nodes sees), or an AccumulateGrad."""
    name = e.name
    return (
        name.startswith(names.EVALUATE)
        or name == names.ACCUMULATE_GRAD
        or (e.seq >= 0 and e.fwd_thread != 0)
    )


# ------------------------------------------------------------------------------ nesting
class _Tree:
    """Host events of every thread with their parents (per-thread nesting by time)."""

    def __init__(self, events: Iterable[Ev]) -> None:
        self.ev: list[Ev] = [e for e in events if e.kind == CPU]
        self.parent: list[int] = [-1] * len(self.ev)
        self.children: list[list[int]] = [[] for _ in self.ev]
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
                    self.children[p].append(i)
                    self.child_ns[p] += min(e.end_ns, self.ev[p].end_ns) - e.start_ns
                stack.append(i)
        self.order = sorted(
            range(len(self.ev)), key=lambda i: (self.ev[i].start_ns, -self.ev[i].end_ns)
        )

    def self_ns(self, i: int) -> int:
        return max(0, self.ev[i].duration_ns - self.child_ns[i])

    def gaps(self, i: int) -> list[tuple[int, int]]:
        """The parts of event i's interval that none of its children covers (its own time)."""
        e = self.ev[i]
        out, t = [], e.start_ns
        for c in self.children[i]:  # in start order, not overlapping
            a, b = self.ev[c].start_ns, min(self.ev[c].end_ns, e.end_ns)
            if a > t:
                out.append((t, a))
            t = max(t, b)
        if e.end_ns > t:
            out.append((t, e.end_ns))
        return out

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
            for a in tree.ancestors(i):  # the AccumulateGrad node (and the engine's range on it)
                if not (is_node(tree.ev[a]) and names.ACCUMULATE_GRAD in tree.ev[a].name):
                    break
                acc_owner[a] = e.name[len(names.GRAD) :]
    owner: list[Key | None] = [None] * len(tree.ev)
    for i in tree.order:  # parents before children
        e = tree.ev[i]
        own = _own(e, i, acc_owner, owner_of_seq, main_thread)
        p = tree.parent[i]
        context = owner[p] if p >= 0 else (names.UNATTRIBUTED, "other")
        if own is None:
            own = context
        elif own[1] == "":
            own = (own[0], context[1])
        owner[i] = own
    return owner  # type: ignore[return-value]


def _own(e: Ev, i: int, acc_owner, owner_of_seq, main_thread) -> Key | None:
    name = e.name
    if name.startswith(names.MODULE):
        return name[len(names.MODULE) :], "forward"
    if is_node(e):  # a node made on another thread than the step's has no known owner
        known = e.fwd_thread in (0, main_thread)
        return backward_owner(
            seq=e.seq if known else -1,
            accumulate_grad=names.ACCUMULATE_GRAD in name,
            param_owner=acc_owner.get(i),
            owner_of_seq=owner_of_seq,
        ), "backward"
    if name.startswith(names.PHASE):
        return phase_owner(name[len(names.PHASE) :])
    if name.startswith(names.ZERO_GRAD_PREFIX):
        return names.ZERO_GRAD, "other"
    if is_comm(name):
        return names.COMM, ""  # the phase is the context's (see _owners)
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
    calls: dict[Key, int] = defaultdict(int)  # counted whole, divided once: 2.0, not 1.9999...
    for i, e in enumerate(tree.ev):
        p = tree.parent[i]
        counted = e.name.startswith(names.MODULE) or (
            is_node(e) and not (p >= 0 and is_node(tree.ev[p]))  # a node once, not its range too
        )
        if counted and _in_step(tree, i, steps) >= 0:
            calls[owner[i]] += 1
    out.calls = {k: c / n for k, c in calls.items()}


def _host_times(tree: _Tree, owner: list[Key], steps: set[int], out: Attribution, n: int) -> None:
    """Host clock: every event's own time to its owner; the end of a phase or step range after
    its last child, while a collective runs on another thread (the main thread waits for it:
    DDP's finalize_backward), to `communication`."""
    main = tree.ev[next(iter(steps))].thread
    comm = _merged((e.start_ns, e.end_ns) for e in tree.ev if e.thread != main and is_comm(e.name))
    self_ns: dict[Key, int] = defaultdict(int)
    parts_ns: dict[str, int] = defaultdict(int)
    spans: list[tuple[str, int]] = []  # (part, event): what the CPU clock maps again
    comm_by_part: dict[str, int] = defaultdict(int)
    for i in tree.order:  # parents before children
        e = tree.ev[i]
        if _in_step(tree, i, steps) < 0:
            continue
        key, own = owner[i], tree.self_ns(i)
        name = e.name
        if comm and (name.startswith(names.PHASE) or name.startswith(names.STEP)):
            waited = _overlap(_trailing(tree, i), comm)
            own -= waited
            self_ns[(names.COMM, key[1])] += waited
            comm_by_part[_part_of(tree, i)] += waited
        if name == _BACKWARD:  # the engine's work after a node is the node's
            for k, a, b in _gap_owners(tree, i, owner):
                if k != key:
                    self_ns[k] += b - a
                    own -= b - a
        self_ns[key] += own
        if name.startswith(names.PHASE):
            phase = name[len(names.PHASE) :]
            part = _PART_OF_PHASE.get(phase, "data_wait" if phase == "data" else "")
            if part:
                parts_ns[part] += e.duration_ns
                spans.append((part, i))
        elif name.startswith(names.ZERO_GRAD_PREFIX):
            parts_ns["optimizer"] += e.duration_ns
            spans.append(("optimizer", i))
        elif key[0] == names.COMM and (
            tree.parent[i] < 0 or owner[tree.parent[i]][0] != names.COMM
        ):
            comm_by_part[_part_of(tree, i)] += e.duration_ns  # a collective's own call
    for part, ns in comm_by_part.items():
        if part:
            parts_ns[part] -= ns
        parts_ns["exposed_comm"] += ns
    total = sum(tree.ev[s].duration_ns for s in steps)
    parts_ns["host_overhead"] = total - sum(parts_ns.values())
    out.self_s = {k: v / n / 1e9 for k, v in self_ns.items()}
    out.parts_s = {p: parts_ns.get(p, 0) / n / 1e9 for p in names.PARTS}
    _cpu_times(tree, owner, steps, out, n, spans if not comm_by_part else [])


def cpu_clock(points: list[tuple[int, int]]) -> Callable[[int], float] | None:
    """The main thread's CPU clock at any wall instant, from markers (wall ns, CPU ns): linear
    between two markers, each stretch's CPU time at most its wall time (the clock is read just
    before its marker opens); slope 1 before the first and after the last. None with fewer than
    two markers. Preemption between two markers is spread over that stretch evenly."""
    pts = sorted(points)
    if len(pts) < 2:
        return None
    walls = [w for w, _ in pts]
    acc = [0.0]
    for (w0, c0), (w1, c1) in zip(pts, pts[1:]):
        acc.append(acc[-1] + min(max(0, c1 - c0), w1 - w0))

    def at(t: int) -> float:
        j = bisect.bisect_right(walls, t) - 1
        if j < 0:
            return t - walls[0]
        if j >= len(walls) - 1:
            return acc[-1] + (t - walls[-1])
        w0, w1 = walls[j], walls[j + 1]
        return acc[j] + (t - w0) * (acc[j + 1] - acc[j]) / (w1 - w0) if w1 > w0 else acc[j]

    return at


def _cpu_times(
    tree: _Tree, owner: list[Key], steps: set[int], out: Attribution, n: int, spans
) -> None:
    """Every event's own stretches by the main thread's CPU clock (`cpu: <ns>` markers), charged
    to its owner as `_host_times` charges wall time, and the parts' `spans` ((part, event) as
    `_host_times` cut them; host_overhead the rest of the steps) likewise; nothing without
    markers."""
    main = tree.ev[next(iter(steps))].thread
    at = cpu_clock(
        [
            (e.start_ns, int(e.name[len(names.CPU_CLOCK) :]))
            for e in tree.ev
            if e.thread == main and e.name.startswith(names.CPU_CLOCK)
        ]
    )
    if at is None:
        return
    cpu_ns: dict[Key, float] = defaultdict(float)
    for i in tree.order:
        if tree.ev[i].thread == main and _in_step(tree, i, steps) >= 0:
            for k, a, b in _gap_owners(tree, i, owner):
                cpu_ns[k] += at(b) - at(a)
    out.cpu_self_s = {k: v / n / 1e9 for k, v in cpu_ns.items()}
    ordered = sorted(steps, key=lambda i: tree.ev[i].start_ns)
    out.step_cpu_s = [(at(tree.ev[i].end_ns) - at(tree.ev[i].start_ns)) / 1e9 for i in ordered]
    if not spans:
        return
    parts_ns: dict[str, float] = defaultdict(float)
    for part, i in spans:
        parts_ns[part] += at(tree.ev[i].end_ns) - at(tree.ev[i].start_ns)
    parts_ns["host_overhead"] = sum(out.step_cpu_s) * 1e9 - sum(parts_ns.values())
    out.parts_cpu_s = {p: parts_ns.get(p, 0.0) / n / 1e9 for p in names.PARTS}


_BACKWARD = names.phase_range("backward")


def _gap_owners(tree: _Tree, i: int, owner: list[Key]) -> list[tuple[Key, int, int]]:
    """Event i's own stretches, each with its owner: i's, except inside `phase: backward`, where
    a stretch right after a backward node (before the phase's last one) is that node's owner's:
    the engine validating the node's outputs and adding them into the next nodes' inputs, work
    its `evaluate_function` range holds when the profiler records it (and a profiler recording
    backward nodes alone does not)."""
    gaps = tree.gaps(i)
    if tree.ev[i].name != _BACKWARD:
        return [(owner[i], a, b) for a, b in gaps]
    ends = {tree.ev[c].end_ns: c for c in tree.children[i]}
    out = []
    for n, (a, b) in enumerate(gaps):
        c = ends.get(a)
        last = n == len(gaps) - 1 and b == tree.ev[i].end_ns
        mine = c is not None and not last and is_node(tree.ev[c])
        out.append((owner[c] if mine else owner[i], a, b))
    return out


def _trailing(tree: _Tree, i: int) -> list[tuple[int, int]]:
    """The end of event i's interval after its last child: where a phase waits for what it
    launched (DDP's finalize_backward waits there for the last buckets' all-reduce)."""
    gaps = tree.gaps(i)
    return gaps[-1:] if gaps and gaps[-1][1] == tree.ev[i].end_ns else []


def _part_of(tree: _Tree, i: int) -> str:
    """The part of the step event i lies in (its innermost phase range, i itself included);
    '' outside every phase (host_overhead: the remainder)."""
    for a in (i, *tree.ancestors(i)):
        name = tree.ev[a].name
        if name.startswith(names.PHASE):
            phase = name[len(names.PHASE) :]
            return _PART_OF_PHASE.get(phase, "data_wait" if phase == "data" else "")
    return ""


def _merged(spans) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


def _overlap(spans: list[tuple[int, int]], merged: list[tuple[int, int]]) -> int:
    """Nanoseconds of `spans` (disjoint) inside the union `merged` (sorted, disjoint)."""
    total = 0
    for a, b in spans:
        j = bisect.bisect_right(merged, (a, float("inf"))) - 1
        j = max(j, 0)
        while j < len(merged) and merged[j][0] < b:
            lo, hi = max(a, merged[j][0]), min(b, merged[j][1])
            total += max(0, hi - lo)
            j += 1
    return total


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
