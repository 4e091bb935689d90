"""Issue 24 item 3: implausible values are flagged, in the same words in a train run's
description (tests/test_run_ui.py) and in the analysis report."""

from __future__ import annotations

import pandas as pd

from analysis import core
from common import plausible


def test_thresholds_are_strict_and_missing_values_pass_silently():
    assert plausible.ci_flag(0.5) == "" and plausible.ci_flag(0.51).startswith(
        "the mean step time's 95% CI ±51% is wider than ±50%"
    )
    assert plausible.scaling_flag(1.0) == "" and "414% is over 100%" in plausible.scaling_flag(
        4.138
    )
    assert plausible.roof_flag(1.0) == "" and plausible.roof_flag(1.5).startswith(
        "150% of roof is over 100%"
    )
    for flag in (plausible.ci_flag, plausible.scaling_flag, plausible.roof_flag):
        assert flag(None) == flag(float("nan")) == flag("2") == ""


def test_report_flags_points_scaling_and_wide_intervals():
    points = pd.DataFrame(
        [
            {"env_label": "e", "label": "resnet18/b2/fp32", "fraction_of_roof": 1.2},
            {"env_label": "e", "label": "resnet18/b4/fp32", "fraction_of_roof": 0.3},
        ]
    )
    scaling_rows = pd.DataFrame(
        [{"env_label": "e", "label": "resnet18/b2/fp32/ddp×2", "scaling_efficiency": 4.138}]
    )
    train = pd.DataFrame(
        [
            {"env_label": "e", "run_id": "abcdef123", "run_name": "n1", "step_time_ci95_rel": 2.86},
            {
                "env_label": "e",
                "run_id": "0123456789",
                "run_name": "n2",
                "step_time_ci95_rel": 0.02,
            },
        ]
    )
    flags = core.implausible(points, scaling_rows, train)
    assert flags == [
        f"e: resnet18/b2/fp32: {plausible.roof_flag(1.2)}",
        f"e: resnet18/b2/fp32/ddp×2: {plausible.scaling_flag(4.138)}",
        f"e: train run abcdef12 (n1): {plausible.ci_flag(2.86)}",
    ]
    many = pd.concat([train.iloc[:1]] * 12, ignore_index=True)
    capped = core.implausible(points.iloc[1:], pd.DataFrame(), many)
    assert len(capped) == core.MAX_FLAGS + 1 and capped[-1].startswith("... and 2 more")


def test_a_point_that_averages_runs_of_different_data_sources_says_so():
    """Names and labels carry the data source; points group by config_key (the work per step),
    which does not: the report says when a point mixes sources (issue 24 item 1)."""
    from analysis import join

    runs = pd.DataFrame(
        [
            {
                "run_id": f"r{i}",
                "status": "FINISHED",
                "start_time": i,
                "tags.run_kind": "train",
                "tags.env_label": "box",
                "tags.device_name": "CPU X",
                "tags.config_key": "k1" if i < 3 else "k2",
                "params.data": data,
            }
            for i, data in enumerate(["synthetic", "/d/imagenette", "", "fake", "fake"])
        ]
    )
    train = join.train_runs(runs)
    assert list(train["data_kind"]) == ["synthetic", "folder", "synthetic", "fake", "fake"]
    assert join.mixed_data_notes(train) == [
        "box: config k1 averages runs of different data sources (folder, synthetic): a loader's "
        "cost is in some of them; analyse one source at a time with --filter "
        "\"params.data = 'synthetic'\""
    ]
