"""The breakdown's trace: torch.profiler's Chrome trace cut to the first recorded steps, gzipped.

It opens in ui.perfetto.dev (and chrome://tracing). Bounded: only the events of the first
`keep_steps` `step: i` ranges stay (and the metadata events naming processes and threads); the
top-level key `breakdown` says how many steps it holds out of how many were recorded. Backward
nodes (`autograd::engine::evaluate_function: ...`, or the node's own event, which carries a
forward thread) get an argument `module`: the module whose
forward made them (hooks.Tracker.owner_of_seq), so the trace shows backward per module as the
table does.
"""

from __future__ import annotations

import gzip
import json
from typing import Callable

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
    keep = steps[: max(1, keep_steps)]
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
    facts = {"trace_steps": len(keep), "recorded_steps": len(steps)}
    data["breakdown"] = {
        **facts,
        "about": about,
        "note": f"{len(keep)} of the {len(steps)} recorded steps (`step: i` ranges); modules are "
        "`module: <path>` ranges in forward and the `module` argument of backward nodes",
    }
    text = json.dumps(data, separators=(",", ":"))
    gz = gzip.compress(text.encode("utf-8"), mtime=0)
    return gz, {**facts, "trace_bytes": len(text.encode("utf-8")), "trace_gz_bytes": len(gz)}
