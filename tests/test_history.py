"""analysis/changepoints.py and analysis/history.py on hand-made series: a planted step is found
at its run with what changed there, a flat series reports no change, a short one "insufficient
data" with the runs it needs; the search is ruptures' and its cost the one the test scans."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import changepoints as cp
from analysis import history, history_diff, join
from common import schema

CONFIG = dict(
    model="resnet18",
    batch_size="8",
    precision="fp32",
    image_size="64",
    channels_last="false",
    compile="false",
    optimizer="sgd",
    num_classes="1000",
)


def run_row(i: int, env: str, step_s: float, threads: str = "2", **more) -> dict:
    """A FINISHED train run in analysis's runs layout: start i minutes in, 20 steps of mean
    `step_s` with a ±1 % CI."""
    row = {
        "run_id": f"{env}-{i:03d}",
        "status": "FINISHED",
        "start_time": 1.7e12 + 60_000 * i,
        "tags.run_kind": "train",
        "tags.env_label": env,
        "tags.device_name": "CPU X",
        "tags.config_key": schema.config_key(CONFIG),
        "tags.config_label": "b8/fp32/64px/resnet18",
        "tags.host": more.pop("host", "box"),
        "tags.cpu_model": "CPU X",
        "tags.torch_version": more.pop("torch", "2.14.1"),
        "tags.torch_threads": threads,
        "tags.mlflow.source.git.commit": more.pop("commit", "a" * 40),
        "metrics.step_time_mean_s": step_s,
        "metrics.throughput_samples_per_s": 8 / step_s,
        "metrics.step_time_ci95_rel": 0.01,
        "metrics.measured_iters": 20.0,
        **{f"metrics.{k}": v for k, v in more.items()},
    }
    row.update({f"params.{k}": v for k, v in CONFIG.items()})
    return row


def noisy(n: int, level: float, sd: float, seed: int) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0, sd, n))


def planted(env="threads", n_side=8, step=1.3, sd=0.02, seed=0, **after) -> list[dict]:
    """n_side runs at 0.2 s with 2 threads, then n_side at 0.2 x step with 1 thread."""
    times = noisy(2 * n_side, 0.2, sd, seed)
    times[n_side:] *= step
    return [
        run_row(i, env, t, "2" if i < n_side else "1", **(after if i >= n_side else {}))
        for i, t in enumerate(times)
    ]


def scan(rows, **kw) -> history.History:
    return history.scan(join.train_runs(pd.DataFrame(rows)), **kw)


def test_a_planted_step_is_found_at_its_run_with_the_threads_tag_named():
    rows = planted() + [run_row(i, "steady", t) for i, t in enumerate(noisy(16, 0.2, 0.02, 1))]
    found = {s.env_label: s for s in scan(rows).series}
    s = found["threads"]
    assert s.status == "change" and len(s.changes) == 1
    c = s.changes[0]
    assert c.index == 8 and c.at_run_id == "threads-008" and c.last_before_run_id == "threads-007"
    assert c.p_value < cp.ALPHA and c.slower
    assert c.ratio_ci95[0] > 1.2 and c.ratio_ci95[1] < 1.4  # planted 1.3x
    assert [(t["name"], t["before"], t["after"]) for t in c.changed] == [("threads", "2", "1")]
    # the levels are the configuration's numbers of each side (pooled mean step time)
    before = pd.DataFrame(rows[:8])["metrics.step_time_mean_s"].mean()
    assert c.before.step_time_mean_s == pytest.approx(before)
    assert c.before.samples_per_s == pytest.approx(8 / before)
    assert len(c.before.run_ids) == len(c.after.run_ids) == 8
    assert "threads 2 -> 1" in c.sentence() and "p = " in c.sentence()
    assert found["steady"].status == "no change" and not found["steady"].changes
    assert "no change over 16 runs" in found["steady"].summary()


def test_a_short_series_is_insufficient_data_never_no_change():
    (s,) = scan([run_row(i, "short", 0.2 * (1 + i)) for i in range(7)]).series
    assert s.status == "insufficient data" and s.needs == 8
    assert "insufficient data: 7 run(s)" in s.summary() and "at least 8" in s.summary()


def test_a_regression_that_recovers_is_two_changes_each_against_its_neighbours():
    times = noisy(28, 0.2, 0.01, 3) * np.repeat([1.0, 1.25, 1.0], [8, 12, 8])
    (s,) = scan([run_row(i, "e", t) for i, t in enumerate(times)]).series
    assert [c.index for c in s.changes] == [8, 20]
    assert [len(c.before.run_ids) for c in s.changes] == [8, 12]
    assert s.changes[0].slower and not s.changes[1].slower
    assert len(s.levels) == 3


def test_order_by_a_version_tag_orders_by_version_then_start():
    # the runs of torch 2.10 were started after those of 2.9 in reverse: version order decides
    rows = [run_row(i, "e", 0.2, torch="2.10.0" if i < 8 else "2.9.1") for i in range(16)]
    (s,) = scan(rows, order_by="torch_version").series
    assert s.order_values[:8] == ["2.9.1"] * 8 and s.run_ids[0] == "e-008"
    with pytest.raises(ValueError, match="order_by must be"):
        history.order_column("colour")


def test_a_slowdown_with_more_load_is_laid_at_the_loads_door():
    quiet = {"load_average_1m_max": 1.0, "cpu_count": 2.0}
    busy = {"load_average_1m_max": 6.0, "cpu_count": 2.0}
    rows = [
        run_row(i, "e", t, **(quiet if i < 8 else busy))
        for i, t in enumerate(noisy(16, 0.2, 0.02, 4) * np.repeat([1.0, 1.3], 8))
    ]
    (s,) = scan(rows).series
    c = s.changes[0]
    assert "load rose" in c.load and "0.5 -> 3" in c.load and "may be the load's" in c.load
    assert ("load average per CPU", "0.5", "3") in [
        (t["name"], t["before"], t["after"]) for t in c.changed
    ]
    assert c.machine == ""


def test_a_change_of_machine_says_so():
    rows = planted(host="other")
    c = scan(rows).series[0].changes[0]
    assert "change of machine (host box -> other)" in c.machine


def test_the_split_is_the_one_ruptures_binseg_finds_and_its_gain_the_tests_statistic():
    """With equal weights our split and gain are ruptures' Binseg with the l2 cost (the reference
    library: requirements-dev.txt; the analysis does not import it, docs/analysis.md says why)."""
    import ruptures as rpt

    for seed in range(5):
        y = np.log(noisy(16, 0.2, 0.02, seed) * np.repeat([1.0, 1.1], [5 + seed, 11 - seed]))
        w = np.ones(16)
        theirs = rpt.Binseg(model="l2", min_size=4, jump=1).fit(y).predict(n_bkps=1)[0]
        assert cp.best_split(y, w, 4) == theirs
        cost = rpt.costs.CostL2().fit(y)
        gains = [cost.error(0, 16) - cost.error(0, k) - cost.error(k, 16) for k in range(4, 13)]
        assert cp.max_gain(y, w, 4) == pytest.approx(max(gains))


def test_the_permutation_p_value_is_exact_for_the_best_possible_split():
    """8 runs, 4 low then 4 high: only 2 of the 70 ways to cut them into 4 + 4 put the lows on one
    side; every shuffle that does explains as much, so p is about 2/70 (999 fixed shuffles)."""
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1], float) + np.arange(8) * 1e-6
    p = cp.permutation_p(y, np.ones(8), 4)
    assert p == pytest.approx(2 / 70, abs=0.015)
    assert cp.permutation_p(y, np.ones(8), 4) == p  # fixed shuffles: the same answer every time


def test_own_variance_is_the_runs_ci_over_t_squared():
    own = cp.own_variance(np.array([0.0209, np.nan]), np.array([20.0, 20.0]))
    assert own[0] == pytest.approx((0.0209 / 2.093) ** 2, rel=1e-3) and own[1] == 0.0


def test_module_moves_rank_by_absolute_time_and_keep_shares():
    def layers(conv_ms, fc_ms):
        return pd.DataFrame(
            [
                dict(module="conv1", phase="forward", time_s=conv_ms / 1e3, share=conv_ms / 100, view=True, kind="module"),
                dict(module="fc", phase="backward", time_s=fc_ms / 1e3, share=fc_ms / 100, view=True, kind="module"),
                dict(module="model", phase="forward", time_s=1.0, share=1.0, view=False, kind="module"),
            ]
        )  # fmt: skip

    moves = history_diff.module_moves(layers(10, 5), layers(30, 4))
    assert [(m["module"], m["phase"]) for m in moves] == [("conv1", "forward"), ("fc", "backward")]
    assert moves[0]["delta_ms"] == pytest.approx(20) and moves[0]["after_share"] == pytest.approx(
        0.3
    )
    assert math.isclose(moves[1]["delta_ms"], -1)


def test_breakdown_runs_either_side_name_the_modules_that_moved():
    h = scan(planted())
    c = h.series[0].changes[0]

    def bd(run_id, start):
        return {
            "run_id": run_id,
            "start_time": start,
            "tags.env_label": "threads",
            "tags.device_name": "CPU X",
            "tags.config_key": schema.config_key(CONFIG),
        }

    runs = pd.DataFrame(
        [bd("old", c.before.first_start_ms - 1), bd("b1", c.before.first_start_ms + 5),
         bd("b2", c.after.first_start_ms - 5), bd("a1", c.after.first_start_ms + 5),
         bd("a2", c.after.last_start_ms)]
    )  # fmt: skip
    pairs = history.breakdown_pairs(h, runs)
    assert {k: (a["run_id"], b["run_id"]) for k, (a, b) in pairs.items()} == {(0, 0): ("b2", "a1")}
    row = dict(module="layer1", phase="backward", view=True, kind="module")
    layers = {
        "b2": pd.DataFrame([{**row, "time_s": 0.010, "share": 0.05}]),
        "a1": pd.DataFrame([{**row, "time_s": 0.030, "share": 0.12}]),
    }
    history.add_modules(h, pairs, layers)
    assert c.modules[0]["delta_ms"] == pytest.approx(20)
    assert "layer1 backward 10 -> 30 ms (5.0% -> 12.0% of the step)" in c.sentence()
    assert history.breakdown_pairs(scan(planted(), order_by="torch_version"), runs) == {}


def test_the_report_section_figure_and_json_carry_each_change(tmp_path):
    import json

    from analysis import history_report

    h = scan(planted() + [run_row(i, "steady", t) for i, t in enumerate(noisy(16, 0.2, 0.02, 1))])
    pngs = history_report.figures(h, tmp_path)
    assert [t for t, _ in pngs] == ["Step time over time: threads: b8/fp32/64px/resnet18"]
    assert pngs[0][1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blocks = history_report.body(h, [("figure", t, p.name) for t, p in pngs])
    assert "2 series: 1 with a change, 1 without" in blocks[0][1]
    table = next(b[1] for b in blocks if b[0] == "table")
    assert table.rows[0][1] == "threads-" and table.rows[0][-1] == "threads 2 → 1"
    assert blocks[-1] == ("figure", pngs[0][0], pngs[0][1].name)
    (rec,) = json.loads(json.dumps(history_report.to_json(h)))  # plain JSON values only
    assert rec["at_run_id"] == "threads-008" and rec["changed"][0]["tag"] == "torch_threads"
    assert rec["before"]["run_ids"][-1] == "threads-007" and rec["p_value"] < 0.05
