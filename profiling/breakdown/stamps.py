"""The Tracker's own timeline, kept in Python, turned into profiler events. Pure: no torch needed.

On the CPU (one process) the Tracker does not open a profiler range per module call: it appends
the wall clock (`time.time_ns`, the clock kineto's host events are on) to a list at every module
entry and exit, in every parameter's post-accumulate-grad hook and at the CPU-clock ticks. A stamp
costs a tuple and an append; a profiler range that the lean profiler records cost about 3 us of
thread CPU per module call in the model, plus its recording (bench/breakdown_overhead.py). The
profiler then records only what Python cannot see: backward nodes, torch's own ranges (the
optimizer's), and the Tracker's phase and step ranges, a few per step.

`to_events` turns the stamps into the same `Ev`s the profiler's ranges were, so that attribution
does not know the difference:

* the clocks: the offset that puts a stamp on kineto's timeline is the smallest, over the step
  and phase ranges of the recorded steps, of (the range's start in the profiler) - (the stamp
  taken just before it opened); on Linux both are CLOCK_REALTIME and the difference is the
  range's opening cost, 1 to 3 us here (`offset_ns`);
* module ranges: an entry and its exit, nested as the calls were;
* CPU-clock markers (`cpu: <ns>`): an instant at the stamp;
* grad markers (`grad: <owner>`): the hook runs inside its parameter's AccumulateGrad, so the
  markers, in time order, are the AccumulateGrad nodes' on the same thread, in time order: the
  k-th marker goes to the k-th AccumulateGrad (an instant at its middle, so it nests inside it).
  When the counts differ (a node without a hooked parameter), each marker goes to the
  AccumulateGrad whose interval is nearest to it, within `GRAD_SLACK_NS`, else it is dropped and
  that node's work stays `unattributed`.
"""

from __future__ import annotations

import bisect
import json
from typing import Iterable

from profiling.breakdown import names
from profiling.breakdown.events import CPU, Ev

GRAD_SLACK_NS = 50_000
"""how far (ns) a grad marker may lie outside the AccumulateGrad it is matched to by time"""

Stamp = tuple
"""(wall ns, label) a range opens; (wall ns, None) the innermost closes; (wall ns, label, 0) an
instant marker"""


def offset_ns(anchors: Iterable[tuple[str, int]], events: Iterable[Ev]) -> int:
    """The ns to add to a stamp to put it on the events' clock. `anchors`: (label of a profiler
    range, stamp taken just before it opened), in time order; the k-th anchor of a label goes
    with the k-th range of that name. Each pair's delay (the range's start less the stamp) is the
    offset plus the time the range took to open, so the smallest delay is the closest to the
    offset (a median let one slow opening, the profiler's first, shift every stamp of a one-step
    recording late enough to leave its enclosing range). 0 without a match (the clocks are then
    taken to be the same)."""
    starts: dict[str, list[int]] = {}
    for e in sorted(events, key=lambda e: e.start_ns):
        if e.kind == CPU:
            starts.setdefault(e.name, []).append(e.start_ns)
    seen: dict[str, int] = {}
    diffs = []
    for label, t in anchors:
        k = seen.get(label, 0)
        seen[label] = k + 1
        if k < len(starts.get(label, ())):
            diffs.append(starts[label][k] - t)
    return min(diffs) if diffs else 0


def to_events(
    stamps: list[Stamp], events: list[Ev], thread: int, offset: int = 0
) -> tuple[list[Ev], int]:
    """(the stamps as events on `thread`, shifted by `offset` ns; how many grad markers matched no
    AccumulateGrad). Ranges left open are dropped; see the module doc for the markers."""
    out: list[Ev] = []
    grads: list[tuple[int, str]] = []
    open_: list[tuple[int, str]] = []
    for s in stamps:
        t = s[0] + offset
        if len(s) == 3:
            if s[1].startswith(names.GRAD):
                grads.append((t, s[1]))
            else:
                out.append(Ev(s[1], t, t, thread))
        elif s[1] is not None:
            open_.append((t, s[1]))
        elif open_:
            t0, label = open_.pop()
            out.append(Ev(label, t0, max(t0, t), thread))
    accs = sorted(
        (e for e in events if e.thread == thread and e.name == names.ACCUMULATE_GRAD),
        key=lambda e: e.start_ns,
    )
    placed, lost = _match_grads(grads, accs)
    out.extend(Ev(label, mid, mid, thread) for mid, label in placed)
    out.sort(key=lambda e: (e.start_ns, -e.end_ns))
    return out, lost


def _match_grads(grads: list[tuple[int, str]], accs: list[Ev]) -> tuple[list[tuple[int, str]], int]:
    """(instant, label) for each grad marker placed inside an AccumulateGrad; the number dropped."""
    mid = [(a.start_ns + a.end_ns) // 2 for a in accs]
    if len(grads) == len(accs):  # one hook per node: the same order
        return [(m, label) for m, (_t, label) in zip(mid, grads)], 0
    starts = [a.start_ns for a in accs]
    placed, lost = [], 0
    for t, label in grads:
        j = bisect.bisect_right(starts, t)
        best = None
        for k in (j - 1, j):
            if 0 <= k < len(accs):
                a = accs[k]
                gap = max(a.start_ns - t, t - a.end_ns, 0)
                if gap <= GRAD_SLACK_NS and (best is None or gap < best[0]):
                    best = (gap, k)
        if best is None:
            lost += 1
        else:
            placed.append((mid[best[1]], label))
    return placed, lost


def merge_trace(trace_json: str, evs: list[Ev]) -> str:
    """torch.profiler's Chrome trace with `evs` (the stamps as events) added on the row of its
    first `step: i` range (`trace_events`); as it is without such a range or events."""
    if not evs:
        return trace_json
    data = json.loads(trace_json)
    events = data.get("traceEvents") or []
    steps = [
        e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(names.STEP)
    ]
    if not steps:
        return trace_json
    first = min(steps, key=lambda e: float(e.get("ts", 0)))
    base = int(data.get("baseTimeNanoseconds") or 0)
    events.extend(trace_events(evs, first.get("pid"), first.get("tid"), base))
    data["traceEvents"] = events
    return json.dumps(data, separators=(",", ":"))


def trace_events(evs: list[Ev], pid, tid, base_ns: int) -> list[dict]:
    """Chrome-trace complete events ("X") for the stamped ranges and grad markers (the CPU-clock
    markers are left out: a number per millisecond that says nothing to a reader), on the
    profiler's own process and thread rows, `ts` in us from the trace's `baseTimeNanoseconds`."""
    return [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": e.name,
            "pid": pid,
            "tid": tid,
            "ts": (e.start_ns - base_ns) / 1e3,
            "dur": e.duration_ns / 1e3,
        }
        for e in evs
        if not e.name.startswith(names.CPU_CLOCK)
    ]
