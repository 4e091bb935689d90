"""The what-if model and its scoring, against hand-computed truths (roofline/whatif.py,
roofline/scoring.py, train/whatif/measured.py, the breakdown rows' reader). No store, no torch."""

from __future__ import annotations

import math

import pytest

from roofline.model import Roof
from roofline.scoring import Measured, calibration, check_text, verdict
from roofline.whatif import BatchFit, Move, Original, Row, moves_for, predict
from train.whatif import measured as meas
from train.whatif.source import parse_rows

# conv: 50 % of the step at 100 FLOP/B (compute-bound: the ridge is 1 FLOP/B); bn: 30 %, no
# FLOPs (elementwise); the optimizer 20 %. fp32 10 GFLOP/s, bf16 20, DRAM 10 GB/s.
ROWS = [
    Row("layer.conv", "forward", "module", True, 0.5, 1e9, 1e7),
    Row("layer.bn", "backward", "module", True, 0.3, 0.0, 1e7),
    Row(
        "layer", "forward", "module", False, 0.8, 1e9, 2e7
    ),  # a container: not a row the model sums
    Row("optimizer", "optimizer", "step", False, 0.2),
]
ROOF = Roof("cpu", {"fp32": 1e10, "bf16": 2e10}, {"dram": 1e10})
ORIG = Original("cpu", batch_size=2, step_s=0.1, params=1e6)


def _pred(name, rows=ROWS, orig=ORIG, roof=ROOF, fit=None):
    moves, _ = moves_for(orig, ["bf16"])
    (move,) = [m for m in moves if m.name == name]
    return predict(move, rows, orig, roof, fit)


def test_bf16_moves_compute_rows_with_the_peak_ratio_and_elementwise_rows_with_their_bytes():
    p = _pred("bf16")
    cast = 12 * 1e6 / 1e10 / 0.1  # autocast's weight casts: 1.2 ms of a 100 ms step
    slow = 0.5 * 0.5 + 0.3 * 1.0 + 0.2 + cast  # bn's bytes kept, the casts paid
    fast = 0.5 * 0.5 + 0.3 * 0.5 + 0.2  # bn's bytes halved, no cast
    assert (p.low, p.high) == pytest.approx((1 / slow, 1 / fast))
    assert p.shares["peak_ratio"] == 2.0 and "bf16 ceiling" in p.assumes


def test_a_compute_row_that_becomes_memory_bound_at_bf16_moves_with_bandwidth():
    """At 1.5 FLOP/B the row is compute-bound in fp32 (ridge 1) but not at bf16 (ridge 2): kept
    bytes give 1.5 x 10 GB/s = 15 GFLOP/s (factor 10/15), halved bytes reach the bf16 peak (1/2)."""
    rows = [Row("fc", "forward", "module", True, 1.0, 1.5e9, 1e9)]
    p = _pred("bf16", rows, Original("cpu", batch_size=2))
    assert (p.low, p.high) == pytest.approx((1.5, 2.0))
    assert "nothing counted" in p.assumes  # no parameter count: no cast term


def test_other_moves_hand_computed():
    assert (_pred("channels_last").low, _pred("channels_last").high) == (1.0, 1.0)
    c = _pred("compile")
    assert (c.low, c.high) == pytest.approx((1.0, 1 / 0.7))  # bn's 30 % removed at most
    x2, half = _pred("batch_x2"), _pred("batch_half")
    assert x2.low == pytest.approx(2 / (0.8 * 2 + 0.2)) and x2.high == pytest.approx(x2.low)
    assert half.low == pytest.approx(0.5 / (0.8 * 0.5 + 0.2))


def test_unnamed_time_and_the_residual_widen_the_batch_interval():
    rows = [*ROWS[:2], Row("unattributed", "backward", "step", False, 0.1)]  # 10 % left unnamed
    p = _pred("batch_x2", rows)  # conv + bn x2, unattributed x1-x2, the 10 % no row holds x2
    assert (p.low, p.high) == pytest.approx((2 / (0.9 * 2 + 0.1 * 2), 2 / (0.9 * 2 + 0.1)))


def test_the_batch_fit_replaces_the_rows_for_batch_moves():
    fit = BatchFit(fixed_s=0.02, fixed_ci95_s=0.01, step_s=0.1, batches=(2, 4), runs=4)
    p = _pred("batch_x2", fit=fit)
    assert (p.low, p.high) == pytest.approx((2 / (0.1 + 0.9 * 2), 2 / (0.3 + 0.7 * 2)))
    assert "intercept" in p.assumes


def test_nothing_is_predicted_without_the_numbers_it_needs():
    assert "no measured bf16 peak" in _pred("bf16", roof=Roof("cpu", {"fp32": 1e10}, {})).why_not
    none = predict(Move("compile", "compile", False, True), [], ORIG, ROOF, None, "no breakdown")
    assert not none.made and none.why_not == "no breakdown"
    moves, lines = moves_for(Original("cpu", data_kind="fake", workers=0), [])
    assert [m.name for m in moves][-1] == "workers_x2" and moves[-1].to == 2
    assert "precision" in lines[0]
    _, synthetic = moves_for(ORIG, ["bf16"])
    assert synthetic == [
        "workers: not applicable: synthetic data is one batch resident on the device, with no loader"
    ]


@pytest.mark.parametrize(
    "measured, want",
    [
        (Measured(1.5, 1.45, 1.55), "held"),  # inside [1.3, 1.7]
        (Measured(1.25, 1.2, 1.31), "held"),  # overlaps its low end
        (Measured(2.0, 1.8, 2.2), "beaten"),
        (Measured(1.0, 0.95, 1.05), "missed"),
        (Measured(1.5, 1.45, 1.55, "the original is unstable: ..."), "not judged"),
        (Measured(1.5, 0.9, 2.5), "not judged"),  # x2.8 wide: says nothing
        (Measured(1.5), "not judged"),  # no interval
    ],
)
def test_verdicts(measured, want):
    assert verdict(1.3, 1.7, "", measured)[0] == want
    assert verdict(1.0, 2.5, "", measured)[0] == "not predicted"  # x2.5 wide
    assert verdict(None, None, "no breakdown", measured) == ("not predicted", "no breakdown")


def test_the_measured_side_pools_steps_and_flags_unstable_runs():
    runs = [
        {"run_id": "a", "step_time_mean_s": 0.1, "measured_iters": 10},
        {"run_id": "b", "step_time_mean_s": 0.2, "measured_iters": 30},
    ]
    s = meas.side("original", runs, 8)
    assert s.step_s == pytest.approx((0.1 * 10 + 0.2 * 30) / 40) and s.spread == 2.0
    sd = math.sqrt(((0.1 - 0.15) ** 2 + (0.2 - 0.15) ** 2))
    assert s.ci_rel == pytest.approx(12.706 * sd / math.sqrt(2) / 0.15)
    assert "x2 (over x1.5)" in s.unstable
    steady = meas.side(
        "bf16", [{"run_id": i, "step_time_mean_s": t} for i, t in enumerate((0.05, 0.05))], 8
    )
    m = meas.measured(s, steady)
    assert m.speedup == pytest.approx(0.175 / 0.05) and m.low is not None and m.unstable


def test_calibration_counts_errors_and_widths_and_names_a_knob_that_keeps_missing():
    checks = [
        {
            "knob": "precision",
            "verdict": "missed",
            "predicted_low": 2.0,
            "predicted_high": 3.0,
            "measured": 1.2,
        },
        {
            "knob": "precision",
            "verdict": "missed",
            "predicted_low": 4.0,
            "predicted_high": 6.0,
            "measured": 1.1,
        },
        {
            "knob": "compile",
            "verdict": "held",
            "predicted_low": 1.0,
            "predicted_high": 1.4,
            "measured": 1.1,
        },
        {
            "knob": "compile",
            "verdict": "not predicted",
            "predicted_low": None,
            "predicted_high": None,
            "measured": 0.9,
        },
    ]
    prec, comp = calibration(checks)
    assert prec.keeps_missing and prec.counts["missed"] == 2 and prec.median_width == 1.5
    want = (abs(math.log(1.2 / math.sqrt(6))) + abs(math.log(1.1 / math.sqrt(24)))) / 2
    assert prec.median_abs_log_error == pytest.approx(want)
    assert not comp.keeps_missing and comp.judged == 1 and comp.n == 2
    assert check_text("bf16", 1.3, 1.9, 1.52, 1.44, 1.60, "held") == (
        "bf16: predicted x1.3-1.9, measured x1.52 (1.44-1.6), held"
    )


def test_breakdown_rows_that_are_no_numbers_are_left_out_with_a_line():
    text = (
        "module,phase,kind,depth,leaf,share,flops,bytes\n"
        "conv1,forward,module,1,True,0.25,100,10\n"
        "bn1,forward,module,1,True,nan,0,10\n"
        "relu,forward,module,1,True,1.5,,\n"
        "optimizer,optimizer,step,-1,False,0.1,,\n"
    )
    rows, notes = parse_rows(text, "bd1")
    assert [r.module for r in rows] == ["conv1", "optimizer"] and rows[0].leaf
    assert notes == [
        "breakdown run bd1: layers.csv row 3 left out: share 'nan' is not a number in [0, 1]",
        "breakdown run bd1: layers.csv row 4 left out: share '1.5' is not a number in [0, 1]",
    ]
    assert parse_rows("module,phase\nx,y\n", "bd2")[1] == [
        "breakdown run bd2: layers.csv lacks the columns kind, leaf, share, flops, bytes"
    ]
