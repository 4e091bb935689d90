"""The Tracker's Python stamps as profiler events (profiling/breakdown/stamps.py), on made-up
stamps and events with hand-worked answers; and the stamps of a real step attributed as the
profiler ranges they replace were."""

from __future__ import annotations

import json

import pytest

from profiling.breakdown import names
from profiling.breakdown.events import Ev
from profiling.breakdown.stamps import merge_trace, offset_ns, to_events

ACC = names.ACCUMULATE_GRAD


def _by_name(evs):
    return {(e.name, e.start_ns): e for e in evs}


def test_ranges_nest_markers_are_instants_and_the_offset_shifts_all():
    stamps = [
        (100, "module: net"),
        (110, "module: conv"),
        (120, names.CPU_CLOCK + "7000", 0),
        (150, None),
        (160, "module: fc"),
        (190, None),
        (200, None),
        (210, "module: head"),  # never closed (an interrupt): dropped
    ]
    evs, lost = to_events(stamps, [], thread=3, offset=5)
    got = [(e.name, e.start_ns, e.end_ns, e.thread) for e in evs]
    assert got == [
        ("module: net", 105, 205, 3),
        ("module: conv", 115, 155, 3),
        ("cpu: 7000", 125, 125, 3),
        ("module: fc", 165, 195, 3),
    ]
    assert lost == 0


def test_grad_markers_go_to_the_accumulate_grads_in_order_at_their_middle():
    accs = [Ev(ACC, 300, 310, thread=1), Ev(ACC, 320, 330, thread=1), Ev(ACC, 500, 520, thread=2)]
    stamps = [(298, names.GRAD + "conv", 0), (333, names.GRAD + "fc", 0)]
    evs, lost = to_events(stamps, accs, thread=1)
    # same count on the thread: the k-th marker is the k-th node's, even 2 ns before it starts
    assert [(e.name, e.start_ns, e.end_ns) for e in evs] == [
        ("grad: conv", 305, 305),
        ("grad: fc", 325, 325),
    ]
    assert lost == 0


def test_grad_markers_without_one_node_each_go_to_the_nearest_within_the_slack():
    accs = [Ev(ACC, 1_000, 1_010), Ev(ACC, 2_000, 2_010), Ev(ACC, 3_000, 3_010)]
    stamps = [
        (2_012, names.GRAD + "fc", 0),  # 2 ns after the second node ends
        (200_000, names.GRAD + "far", 0),  # 197 us from any node: dropped
    ]
    evs, lost = to_events(stamps, accs, thread=1)
    assert [(e.name, e.start_ns) for e in evs] == [("grad: fc", 2_005)]
    assert lost == 1


def test_offset_is_the_smallest_opening_delay_each_anchor_with_its_own_range():
    events = [
        Ev("step: 0", 1_003, 2_000),
        Ev("phase: forward", 1_100, 1_500),
        Ev("step: 1", 5_001, 6_000),
        Ev("phase: forward", 5_200, 5_500),
        Ev("step: 2", 9_010, 9_500),
    ]
    anchors = [
        ("step: 0", 1_000),
        ("phase: forward", 1_090),
        ("step: 1", 5_000),
        ("phase: forward", 5_195),  # the second phase range, not the first (1_100 - 5_195 < 0)
        ("step: 2", 9_000),
        ("step: 9", 1),  # no such range: left out
    ]
    assert offset_ns(anchors, events) == 1  # delays 3, 10, 1, 5, 10
    assert offset_ns([], events) == 0


def test_merge_trace_adds_ranges_on_the_step_row_without_cpu_markers():
    trace = {
        "baseTimeNanoseconds": 1_000_000,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 7, "tid": 0},
            {"ph": "X", "name": "step: 0", "pid": 7, "tid": 42, "ts": 1.0, "dur": 9.0},
        ],
    }
    evs = [
        Ev("module: conv", 1_002_000, 1_005_500, thread=1),
        Ev("cpu: 99", 1_003_000, 1_003_000, thread=1),
    ]
    data = json.loads(merge_trace(json.dumps(trace), evs))
    added = data["traceEvents"][2:]
    assert added == [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "module: conv",
            "pid": 7,
            "tid": 42,
            "ts": 2.0,
            "dur": 3.5,
        }
    ]
    assert merge_trace("{}", []) == "{}"  # nothing to add: the text as it is


def test_stamped_and_profiler_ranges_attribute_the_same_calls():
    """One lean step of a small net, its modules timed by stamps: every module's forward call and
    every backward node (AccumulateGrads by their markers) is found, as with profiler ranges."""
    import torch

    from profiling.breakdown.attribute import attribute
    from profiling.breakdown.events import from_kineto
    from profiling.breakdown.recording import kineto_results, lean_profile, native_stderr_muted
    from profiling.breakdown.recording import tracker_for
    from train.step import StepParts, train_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 2, 3)
    )
    x, y = torch.randn(2, 2, 4, 4), torch.tensor([0, 2])
    with tracker_for(model, "net", lean=True) as tracker:
        assert tracker.stamps
        parts = StepParts(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            lambda: torch.autocast("cpu", enabled=False),
            mark=tracker.mark,
        )
        train_step(parts, x, y)
        tracker.clear()
        prof = lean_profile()
        with native_stderr_muted():
            prof.__enter__()
        with tracker.span(names.step_range(0)):
            train_step(parts, x, y)
        with native_stderr_muted():
            prof.__exit__(None, None, None)
            raw = from_kineto(kineto_results(prof))
    assert not any(e.name.startswith(names.MODULE) for e in raw)  # no profiler range per module
    events = tracker.events(raw)
    assert tracker.lost_grad_markers == 0
    att = attribute(events, tracker.owner_of_seq)
    calls = att.calls
    assert all(calls[(m, "forward")] == 1 for m in ("net", "0", "1", "2", "3"))
    # conv: ConvolutionBackward0 + 2 AccumulateGrads; linear: AddmmBackward0, TBackward0 + 2
    assert calls[("0", "backward")] == 3 and calls[("3", "backward")] == 4
    assert calls[("1", "backward")] == 1 and calls[("2", "backward")] == 1  # ReLU, view
    assert att.share_clock == "thread_cpu"
    assert sum(att.cpu_self_s.values()) == pytest.approx(att.step_cpu_s[0])


def test_record_fills_the_given_walls_and_merges_the_stamps_into_events_and_trace():
    """record() on the CPU: each recorded step's seconds go into the given `walls`; the module ranges
    come from the stamps (every module once per step, each grad marker matched) and are in the
    trace on the step's thread."""
    from profiling.breakdown.recording import record
    from train.bench import preflight
    from train.config import TrainConfig

    cfg = TrainConfig(
        model="resnet18", batch_size=2, image_size=32, device="cpu", warmup_iters=1, iters=2
    )
    seen: list[float] = []
    rec = record(cfg, preflight(cfg), 2, walls=seen)
    assert rec.step_wall_s is seen and len(seen) == 2
    modules = [e for e in rec.events if e.name.startswith(names.MODULE)]
    # resnet18's 68 modules once a step, but each of the 8 blocks calls its ReLU twice
    assert len(rec.tracker.paths) == 68 and len(modules) == 2 * (68 + 8)
    assert rec.tracker.lost_grad_markers == 0
    grads = [e for e in rec.events if e.name.startswith(names.GRAD)]
    assert len(grads) == 2 * 62  # resnet18's 62 parameter tensors, each step
    trace = json.loads(rec.trace_json)
    step_rows = {
        (e["pid"], e["tid"])
        for e in trace["traceEvents"]
        if str(e.get("name", "")).startswith(names.STEP)
    }
    traced = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith(names.MODULE)]
    assert len(traced) == len(modules) and {(e["pid"], e["tid"]) for e in traced} == step_rows
