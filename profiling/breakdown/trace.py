"""The breakdown's trace: torch.profiler's Chrome trace cut to typical recorded steps, gzipped.

It opens in ui.perfetto.dev as it is, gzipped (and in chrome://tracing). Bounded: only the events
of `keep_steps` consecutive `step: i` ranges stay, those closest to the recorded steps' median
duration (`typical_window`; the first step may be the slowest), and the metadata events naming
processes and threads; the top-level key `breakdown` says which steps it holds out of how many
were recorded, their durations and the median. Backward
nodes (`autograd::engine::evaluate_function: ...`, or the node's own event, which carries a
forward thread) get an argument `module`: the module whose
forward made them (hooks.Tracker.owner_of_seq), so the trace shows backward per module as the
table does.
"""

from __future__ import annotations

import gzip
import json
import statistics
from typing import Callable

from common import fmt
from profiling.breakdown import names


def bound_trace(
    trace_json: str,
    keep_steps: int,
    owner_of_seq: Callable[[int], str | None],
    about: str = "",
) -> tuple[bytes, dict]:
    """(gzipped trace, facts: trace_steps, recorded_steps, trace_bytes (before gzip),
    trace_gz_bytes). Raises ValueError when the trace holds no step range."""
    data = json.loads(trace_json)
    events = data.get("traceEvents") or []
    steps = sorted(
        (e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(names.STEP)),
        key=lambda e: float(e.get("ts", 0)),
    )
    if not steps:
        raise ValueError("the profiler's trace holds no `step: i` range")
    first, median_us = typical_window([float(e.get("dur", 0)) for e in steps], keep_steps)
    keep = steps[first : first + max(1, keep_steps)]
    t0 = float(keep[0]["ts"])
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in keep)
    kept = []
    for e in events:
        if e.get("ph") == "M":
            kept.append(e)
            continue
        ts = e.get("ts")
        if ts is None or not (t0 <= float(ts) <= t1):
            continue
        name = str(e.get("name", ""))
        args = e.get("args")
        if isinstance(args, dict) and (
            name.startswith(names.EVALUATE) or args.get("Fwd thread id")
        ):
            seq = args.get("Sequence number")
            if isinstance(seq, int) and seq >= 0:
                args["module"] = owner_of_seq(seq) or names.UNATTRIBUTED
        kept.append(e)
    data["traceEvents"] = kept
    data["traceName"] = about or "breakdown"
    facts = {
        "trace_steps": len(keep),
        "recorded_steps": len(steps),
        "kept": [str(e["name"])[len(names.STEP) :] for e in keep],
        "kept_ms": [float(e.get("dur", 0)) / 1e3 for e in keep],
        "median_ms": median_us / 1e3,
    }
    data["breakdown"] = {
        **facts,
        "about": about,
        "note": f"{kept_phrase(facts)}; modules are `module: <path>` ranges in forward and the "
        "`module` argument of backward nodes",
    }
    text = json.dumps(data, separators=(",", ":"))
    gz = gzip.compress(text.encode("utf-8"), mtime=0)
    return gz, {**facts, "trace_bytes": len(text.encode("utf-8")), "trace_gz_bytes": len(gz)}


def typical_window(durations: list[float], keep: int) -> tuple[int, float]:
    """(index of the first of `keep` consecutive steps closest to the steps' median duration,
    that median): the window whose durations differ least from the median in total, the earliest
    on a tie. A trace of a typical step, not of the first one (which may be the slowest)."""
    med = statistics.median(durations)
    keep = max(1, min(keep, len(durations)))
    costs = [
        sum(abs(d - med) for d in durations[i : i + keep]) for i in range(len(durations) - keep + 1)
    ]
    return costs.index(min(costs)), med


def kept_phrase(facts: dict) -> str:
    """`recorded step 1 of steps 0-2 (412 ms; their median 410 ms)`: which steps a trace holds."""
    kept, recorded = facts["kept"], facts["recorded_steps"]
    ms = ", ".join(fmt.num(x) for x in facts["kept_ms"])
    which = f"step {kept[0]}" if len(kept) == 1 else f"steps {kept[0]}-{kept[-1]}"
    return (
        f"recorded {which} of {recorded} ({ms} ms; the {'one' if len(kept) == 1 else 'run'} "
        f"closest to the recorded steps' median, {fmt.num(facts['median_ms'])} ms)"
    )
