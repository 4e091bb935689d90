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


def test_load_bench_pairs_neighbouring_steps_and_takes_the_median_difference():
    from bench.breakdown_load import paired_shift, summarise

    pairs = [
        ({("l1", "forward"): 0.10, ("l1", "backward"): 0.20}, {("l1", "forward"): 0.11}),
        (
            {("l1", "forward"): 0.10, ("l1", "backward"): 0.20},
            {("l1", "forward"): 0.13, ("l1", "backward"): 0.21},
        ),
        (
            {("l1", "forward"): 0.30, ("l1", "backward"): 0.20},
            {("l1", "forward"): 0.32, ("l1", "backward"): 0.21},
        ),
    ]
    # forward: +1, +3, +2 points, median 2; backward: -20 (missing counts 0), +1, +1, median 1
    key, pts, per_pair = paired_shift(pairs)
    assert key == ("l1", "forward") and pts == pytest.approx(2.0)
    assert per_pair == pytest.approx([1.0, 3.0, 2.0])
    assert paired_shift([]) == (None, 0.0, [])

    def step(share, wall):
        return {"share": {("a", "forward"): share}, "wall": {("a", "forward"): wall}}

    # one run, steps in order: alone, beside, alone, beside, alone
    run = [step(0.50, 0.50), step(0.51, 0.40), step(0.52, 0.52), step(0.53, 0.41), step(0.40, 0.4)]
    out = {clock: pts for clock, _row, pts in summarise([run])}
    assert out["share"] == pytest.approx(1.0)  # beside - alone: +1, +1
    assert out["wall"] == pytest.approx(10.5)  # -10, -11
    assert out["share control"] == pytest.approx(5.0)  # alone to the next alone: +2, -12
    assert out["wall control"] == pytest.approx(5.0)  # +2, -12


def test_overhead_across_processes_is_their_median_with_the_range():
    from bench.breakdown_overhead import across_processes

    runs = [
        {"cpu_ratio": 1.07, "cpu_aa": 1.0, "wall_ratio": 1.1, "wall_aa": 1.0},
        {"cpu_ratio": 0.94, "cpu_aa": 1.01, "wall_ratio": 1.0, "wall_aa": 1.0},
        {"cpu_ratio": 1.03, "cpu_aa": 0.99, "wall_ratio": 1.2, "wall_aa": 1.0},
    ]
    o = across_processes(runs)
    assert o["cpu_ratio"] == pytest.approx(1.03) and o["wall_ratio"] == pytest.approx(1.1)
    assert o["cpu_aa"] == pytest.approx(1.0) and o["processes"] == 3
    assert (o["cpu_ratio_lo"], o["cpu_ratio_hi"]) == (0.94, 1.07)
    good = {**o, "cpu_aa": 1.0}
    got = {what: got for what, got, _goal, _met in verdicts(good, _coverage(), 0.05)}
    assert got["overhead, thread CPU"] == "+3.0% (A/A control +0.0%, processes -6.0% to +7.0%)"


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


def test_overhead_in_processes_runs_fresh_children_with_steady_malloc(monkeypatch, capsys):
    import json
    import os
    import subprocess
    from types import SimpleNamespace

    from bench import breakdown_overhead as bo

    figures = [
        {
            "cpu_ratio": 1.02,
            "cpu_aa": 1.0,
            "wall_ratio": 1.02,
            "wall_aa": 1.0,
            "plain_cpu_ms": 50.0,
        },
        {
            "cpu_ratio": 1.06,
            "cpu_aa": 1.01,
            "wall_ratio": 1.05,
            "wall_aa": 1.0,
            "plain_cpu_ms": 51.0,
        },
    ]
    calls = []

    def fake_run(argv, **kw):
        calls.append((argv, kw.get("env") or {}))
        out = "noise a child printed first\n" + json.dumps(figures[len(calls) - 1]) + "\n"
        return subprocess.CompletedProcess(argv, 0, stdout=out, stderr="")

    monkeypatch.setattr(bo.subprocess, "run", fake_run)
    args = SimpleNamespace(
        processes=2, batch=4, image_size=64, pairs=3, threads=1, steady_malloc=True
    )
    o = bo.overhead_in_processes(args, "mobilenet_v2")
    assert o["cpu_ratio"] == pytest.approx(1.04) and o["processes"] == 2
    assert (o["cpu_ratio_lo"], o["cpu_ratio_hi"]) == (1.02, 1.06)
    for argv, env in calls:
        assert "--one-process" in argv and argv[argv.index("--models") + 1] == "mobilenet_v2"
        assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert "process 2/2: +6.0% thread CPU (A/A +1.0%; plain step 51.0 ms" in capsys.readouterr().out

    calls.clear()
    args.steady_malloc = False
    bo.overhead_in_processes(args, "mobilenet_v2")
    for _argv, env in calls:  # the environment as it is
        assert env.get("MALLOC_MMAP_THRESHOLD_") == os.environ.get("MALLOC_MMAP_THRESHOLD_")

    def failing(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="Traceback ...\nOSError: no")

    monkeypatch.setattr(bo.subprocess, "run", failing)
    with pytest.raises(SystemExit, match="(?s)process 1 failed: .*OSError: no"):
        bo.overhead_in_processes(args, "resnet18")


def test_the_shared_pairing_alternates_and_runs_the_callers_work_between_pairs():
    """bench/pairing.py: A B, B A, A B; what the caller does with a pair runs before the next."""
    from bench.pairing import alternating, pairs

    log: list[str] = []

    def a() -> float:
        log.append("A")
        return 3.0

    def b() -> float:
        log.append("B")
        return 2.0

    for _ in alternating(a, b, 3):
        log.append("|")
    assert "".join(log) == "AB|BA|AB|"
    assert pairs(a, b, 2) == [1.5, 1.5]


def test_the_load_bench_stops_the_loops_before_alone_steps_and_resumes_them_before_beside_ones():
    """bench/breakdown_load.py's walls list: step 0 alone (stopped before record), then after each
    step the next one's condition: odd steps beside (SIGCONT), even ones alone (SIGSTOP)."""
    import signal

    from bench.breakdown_load import Alternating

    class Proc:
        sent: list[int] = []

        def send_signal(self, sig: int) -> None:
            self.sent.append(sig)

    walls = Alternating([Proc()])
    for wall_s in (0.1, 0.2, 0.3):
        walls.append(wall_s)
    assert walls == [0.1, 0.2, 0.3]
    assert Proc.sent == [signal.SIGCONT, signal.SIGSTOP, signal.SIGCONT]
