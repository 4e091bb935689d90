"""analysis.findings.anomalies.quiet_runs: the runs it skips are exactly runs for which
run_anomalies finds nothing, so the findings are the same with it as without it, over a mix of
quiet, anomalous and malformed runs (their bad values left out by analysis/screen.py first)."""

from __future__ import annotations

import json

import pytest

from analysis.findings import anomalies
from tests.test_findings import CPU, GPU, analyse, peaks, train

BAD = [
    ("step_time_std_s", float("inf")),
    ("step_time_std_s", -0.1),
    ("measured_iters", -3),
    ("device_peak_mem_bytes", float("nan")),
    ("device_mem_total_bytes", 0.0),
    ("device_mem_total_bytes", float("inf")),
    ("gpu_power_max_w", 300.0),
    ("gpu_sm_clock_median_hz", -1.0),
]


def fleet() -> list[dict]:
    rows = [peaks("p", "box", CPU, 1e12), peaks("q", "gpu", GPU, 30e12, dram=300e9)]
    for i in range(40):  # quiet runs: within the CV, memory well below capacity
        more = {"device_peak_mem_bytes": 1e9, "device_mem_total_bytes": 24e9} if i % 2 else {}
        rows.append(train(f"q{i}", "box", CPU, 8 * (1 + i % 3), "fp32", 0.5, start=i, more=more))
    for i, (key, value) in enumerate(BAD):
        rows.append(train(f"b{i}", "gpu", GPU, 8, "bf16", 0.5, start=i, more={key: value}))
    rows.append(train("cv", "box", CPU, 8, "fp32", 0.5, std=0.1, start=99))  # CV 20 %
    rows.append(
        train(
            "mem",
            "gpu",
            GPU,
            16,
            "bf16",
            0.5,
            more={"device_peak_mem_bytes": 23e9, "device_mem_total_bytes": 24e9},
        )
    )
    return rows


def test_skipped_runs_are_those_that_find_and_note_nothing():
    a, _ = analyse(fleet())
    series = {"q3": [0.5] * 20}
    quiet = anomalies.quiet_runs(a.train, series)
    # the 40 quiet runs less q3 (it has a series); b3 (a NaN is missing, silently) and the runs whose
    # bad value analysis/screen.py left out alone (b2, b4, b5, b7: nothing left to judge); b0 and b1
    # (a bad step-time SD) are left out whole, b6 has an NVML sample
    assert quiet == {f"q{i}" for i in range(40) if i != 3} | {"b2", "b3", "b4", "b5", "b7"}
    for r in a.train.to_dict("records"):
        if r["run_id"] in quiet:
            assert anomalies.run_anomalies(r, series.get(r["run_id"])) == []


def test_findings_and_notes_are_the_same_with_and_without_it(monkeypatch):
    rows = fleet()
    a, fast = analyse(rows)
    monkeypatch.setattr(anomalies, "quiet_runs", lambda train, series=None: set())
    b, slow = analyse(rows)
    assert json.dumps(fast.to_json(), sort_keys=True) == json.dumps(slow.to_json(), sort_keys=True)
    assert a.notes == b.notes and len(a.notes) >= 3  # the screen's lines
    kinds = {f["kind"] for c in fast.to_json()["configs"] for f in c["findings"]}
    assert {"variability", "memory_near_capacity"} <= kinds


@pytest.mark.parametrize("column", ["step_time_mean_s", "gpu_power_max_w"])
def test_a_text_value_is_never_skipped(column):
    a, _ = analyse([train("t", "box", CPU, 8, "fp32", 0.5), peaks("p", "box", CPU, 1e12)])
    train_frame = a.train.astype({column: object}) if column in a.train else a.train.copy()
    train_frame[column] = "n/a"
    assert anomalies.quiet_runs(train_frame) == set()
