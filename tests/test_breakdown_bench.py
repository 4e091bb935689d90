"""The breakdown benches' arithmetic (bench/breakdown_overhead.py, bench/breakdown_load.py) on
made-up numbers: medians of paired ratios, the goals and their verdicts. Never a wall-clock
assertion: the benches themselves measure; these check what they compute from what they measure."""

from __future__ import annotations

import pytest

from bench.breakdown_overhead import overhead_goal, pair_ratios, verdicts


def test_pair_ratios_are_medians_of_per_pair_ratios():
    # per pair: A (cpu, wall), B, A, A'
    samples = [
        ((1.0, 2.0), (1.04, 2.2), (1.0, 2.0), (1.01, 1.9)),
        ((2.0, 2.0), (2.2, 2.0), (2.0, 2.0), (2.0, 2.4)),  # one slow pair (a different load)
        ((1.0, 1.0), (1.03, 1.5), (1.0, 1.0), (0.99, 1.0)),
    ]
    r = pair_ratios(samples)
    assert r["cpu_ratio"] == pytest.approx(1.04)  # median of 1.04, 1.10, 1.03
    assert r["wall_ratio"] == pytest.approx(1.1)  # median of 1.1, 1.0, 1.5
    assert r["cpu_aa"] == pytest.approx(1.0)  # median of 1.01, 1.00, 0.99
    assert r["wall_aa"] == pytest.approx(1.0)  # median of 0.95, 1.2, 1.0


def test_overhead_goal_by_config():
    assert overhead_goal(4, 64) == 0.05
    assert overhead_goal(8, 112) == 0.02
    assert overhead_goal(16, 224) == 0.02


def _coverage(**kw):
    c = {
        "attributed": 0.99,
        "to_modules": 0.96,
        "optimizer": 0.2,
        "flops_ratio": 1.0,
        "parts_ratio": 1.0,
        "trace_mb": 0.5,
        "trace_gz_mb": 0.04,
        "step_s": 0.05,
        "wall_s": 10.0,
    }
    return {**c, **kw}


def _met(rows) -> dict[str, bool | None]:
    return {what: met for what, _got, _goal, met in rows}


def test_verdicts_need_the_aa_control_inside_its_goal():
    good = {"cpu_ratio": 1.04, "wall_ratio": 1.1, "cpu_aa": 1.01, "wall_aa": 0.9}
    assert _met(verdicts(good, _coverage(), 0.05))["overhead, thread CPU"] is True
    assert _met(verdicts(good, _coverage(), 0.02))["overhead, thread CPU"] is False
    noisy = {**good, "cpu_aa": 1.03}  # the comparison cannot tell 4 % from its noise
    assert _met(verdicts(noisy, _coverage(), 0.05))["overhead, thread CPU"] is False
    rows = verdicts(good, _coverage(attributed=0.97, to_modules=0.951), 0.05)
    met = _met(rows)
    assert met["step attributed (named rows)"] is False
    assert met["non-optimizer time in modules"] is True
    got = {what: got for what, got, _goal, _met in rows}
    assert got["overhead, thread CPU"] == "+4.0% (A/A control +1.0%)"


def test_load_bench_median_shares_and_largest_shift():
    from bench.breakdown_load import largest_shift, median_shares, summarise

    runs = [
        {("layer1", "forward"): 0.10, ("layer1", "backward"): 0.20},
        {("layer1", "forward"): 0.14, ("layer1", "backward"): 0.22},
        {("layer1", "forward"): 0.11},  # a row missing from a run counts 0
    ]
    med = median_shares(runs)
    assert med[("layer1", "forward")] == pytest.approx(0.11)
    assert med[("layer1", "backward")] == pytest.approx(0.20)
    key, pts = largest_shift(med, {("layer1", "forward"): 0.12, ("layer1", "backward"): 0.23})
    assert key == ("layer1", "backward") and pts == pytest.approx(3.0)
    assert largest_shift({}, {}) == (None, 0.0)
    alone = [
        {"share": {("a", "forward"): 0.5}, "wall": {("a", "forward"): 0.5}},
        {"share": {("a", "forward"): 0.51}, "wall": {("a", "forward"): 0.45}},
    ]
    beside = [
        {"share": {("a", "forward"): 0.52}, "wall": {("a", "forward"): 0.40}},
        {"share": {("a", "forward"): 0.52}, "wall": {("a", "forward"): 0.40}},
    ]
    out = {clock: pts for clock, _row, pts in summarise(alone, beside)}
    assert out["share"] == pytest.approx(1.5)  # median alone 0.505 against 0.52
    assert out["wall"] == pytest.approx(7.5)  # 0.475 against 0.40
    assert out["share control"] == pytest.approx(1.0) and out["wall control"] == pytest.approx(5)


def test_load_bench_top_shares_by_clock():
    from bench.breakdown_load import top_shares
    from profiling.breakdown.table import ModuleTree

    tree = ModuleTree("net", ["net", "a", "b"], {"a", "b"})
    table = [
        {"module": "net", "phase": "forward", "kind": "model", "time_s": 0.6, "share": 0.5},
        {"module": "a", "phase": "forward", "kind": "module", "time_s": 0.4, "share": 0.25},
        {"module": "b", "phase": "forward", "kind": "module", "time_s": 0.2, "share": 0.25},
        {"module": "optimizer", "phase": "optimizer", "kind": "step", "time_s": 0.2, "share": 0.5},
    ]
    assert top_shares(table, tree, "share") == {("a", "forward"): 0.25, ("b", "forward"): 0.25}
    wall = top_shares(table, tree, "wall")  # of the step's 0.8 s
    assert wall == {("a", "forward"): pytest.approx(0.5), ("b", "forward"): pytest.approx(0.25)}
