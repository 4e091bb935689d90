"""python -m analysis.gate on a tracking store: exit 1 on a real regression, 0 on a series without
one (or a slowdown whose interval reaches below the threshold), 3 with one line for a series too
short to test, 2 for bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis import gate
from tests.test_history import noisy, planted, run_row


def log_runs(uri: str, rows: list[dict]) -> None:
    """The rows (analysis's runs layout) as FINISHED runs of experiment 'nightly', in list order
    a minute apart (bench/fleet_store.py's bulk writer: one transaction)."""
    from bench import fleet_store

    def part(row, prefix):
        return {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}

    specs = [
        {
            "name": r["run_id"],
            "status": "FINISHED",
            "tags": part(r, "tags."),
            "params": {k: str(v) for k, v in part(r, "params.").items()},
            "metrics": {k: float(v) for k, v in part(r, "metrics.").items()},
            "series": [],
        }
        for r in rows
    ]
    fleet_store.write_bulk(
        uri, str(Path(uri[len("sqlite:///") :]).parent / "art"), specs, "nightly"
    )


@pytest.fixture
def store(tracking):
    steady = [run_row(i, "steady", t) for i, t in enumerate(noisy(16, 0.2, 0.02, 1))]
    log_runs(tracking, planted() + steady + [run_row(i, "short", 0.2) for i in range(5)])
    return tracking


def run_gate(capsys, *argv) -> tuple[int, str]:
    code = gate.cli(["--cache", "off", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_gate_fails_on_the_planted_regression_and_passes_the_steady_series(store, capsys):
    code, out = run_gate(capsys, "--series", "threads", "--max-slowdown", "3%")
    assert code == gate.EXIT_REGRESSION, out
    line = next(ln for ln in out.splitlines() if ln.startswith("regression: "))
    assert (
        "newest 8 runs 1.2" in line and "threads 2 -> 1" in line and "more than 3.0% slower" in line
    )
    code, out = run_gate(
        capsys, "--series", "steady:b8/fp32/64px/resnet18", "--max-slowdown", "0.03"
    )
    assert (
        code == gate.EXIT_OK and "ok: steady: b8/fp32/64px/resnet18: no change over 16 runs" in out
    )
    # a regression beside a steady series: the job fails
    assert run_gate(capsys, "--series", "steady,threads")[0] == gate.EXIT_REGRESSION
    # 30 % slower passes a 50 % threshold: its interval is below 1.5
    code, out = run_gate(capsys, "--series", "threads", "--max-slowdown", "50%")
    assert code == gate.EXIT_OK and "within 50.0%" in out


def test_too_few_runs_is_its_own_exit_code_with_one_line(store, capsys):
    code, out = run_gate(capsys, "--series", "short,steady")
    assert code == gate.EXIT_INSUFFICIENT
    assert (
        "short: b8/fp32/64px/resnet18: insufficient data: 5 run(s)" in out and "at least 8" in out
    )


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--series", "steady", "--max-slowdown", "5"], "--max-slowdown must be between"),
        (["--series", "nowhere"], "--series nowhere: no FINISHED train run"),
        (["--series", "steady", "--order-by", "colour"], "--order-by must be start_time"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(store, capsys, argv, says):
    code, out = run_gate(capsys, *argv)
    assert code == 2 and says in out and "Traceback" not in out


def test_slowdown_parses_percent_and_fraction():
    assert gate.slowdown("3%") == pytest.approx(0.03) == gate.slowdown("0.03")
    assert np.isclose(gate.slowdown("0%"), 0)
