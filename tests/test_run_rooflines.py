"""Issue 24 item 2: a train run made before its device's peaks run gets its roofline.png, bound and
fraction of roof when analysis runs (analysis/run_rooflines.py), once, and the same as a run made
after the peaks run gets at train time."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

from analysis import run_rooflines
from common import schema
from common.tracking import RunSession
from roofline.model import Roof
from tests.helpers import TINY

MEASURED = Roof(
    "CPU X",
    {"fp32": 1e11},
    {"dram": 2e10},
    {k: "measured: peaks run abc" for k in ("flops:fp32", "bytes:dram")},
)


def _train_row(run_id: str, start: int, roof_tag: str = "", **over) -> dict:
    row = {
        "run_id": run_id,
        "start_time": start,
        "env_label": "box",
        "device_name": "CPU X",
        "model": "resnet18",
        "precision": "fp32",
        "config_label": "resnet18/b2/fp32/32px",
        "roofline_roof": roof_tag,
        "achieved_flops_per_s": 1e10,
        "train_flops_per_step": 2e9,
        "step_time_mean_s": 0.2,
        "modeled_intensity_flops_per_byte": 2.0,
    }
    return {**row, **over}


def test_plan_picks_the_runs_drawn_against_other_ceilings_newest_first(monkeypatch):
    done_tag = "measured: peaks run abc"
    train = pd.DataFrame(
        [
            _train_row("old", 1, "none: no peaks run or vendor entry for CPU X"),
            _train_row("vendor", 3, "vendor: datasheet"),
            _train_row("current", 2, done_tag),  # drawn against these ceilings already
            _train_row("ledger", 4),  # an earlier analysis drew it (the cache has the old tag)
            _train_row("nothing", 5, achieved_flops_per_s=float("nan"), train_flops_per_step=0),
            _train_row("derived", 6, achieved_flops_per_s=float("nan")),
            _train_row("elsewhere", 7, device_name="CPU Y"),  # no roof for its device
        ]
    )
    roofs = {("box", "CPU X"): {"roof": MEASURED}, ("box", "CPU Y"): {"roof": None}}
    todo, more = run_rooflines.plan(train, roofs, {"ledger": done_tag})
    assert [t.run_id for t in todo] == ["derived", "vendor", "old"] and more == 0
    assert todo[0].achieved_flops_per_s == pytest.approx(2e9 / 0.2)  # work / mean step time
    assert todo[1].title == "resnet18/b2/fp32/32px on CPU X"
    monkeypatch.setattr(run_rooflines, "MAX_PER_ANALYSIS", 2)
    todo, more = run_rooflines.plan(train, roofs, {})
    assert len(todo) == 2 and more == 2


def test_ledger_round_trip_and_unreadable(tmp_path):
    assert run_rooflines.load_ledger(tmp_path) == {}
    assert run_rooflines.save_ledger(tmp_path / "c", {"r1": "vendor: x"}) == ""
    assert run_rooflines.load_ledger(tmp_path / "c") == {"r1": "vendor: x"}
    (tmp_path / "c" / run_rooflines.LEDGER).write_text("[not a dict")
    assert run_rooflines.load_ledger(tmp_path / "c") == {}


def test_train_run_made_before_the_peaks_run_gets_its_roofline_when_analysis_runs(
    tracking, tmp_path, capsys
):
    from analysis.app import main as analyze
    from common.envinfo import device_name
    from train.__main__ import main as train

    assert train([*TINY, "--experiment", "early", "--env-label", "box"]) == 0
    client = mlflow.tracking.MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("early").experiment_id])
    assert run.data.tags["roofline_roof"].startswith("none: no peaks run or vendor entry")
    assert "bound" not in run.data.tags and "fraction_of_roof" not in run.data.metrics
    assert "Roofline: no ceilings for" in run.data.tags[schema.TAG_NOTE].splitlines()[1]
    tags = {schema.TAG_ENV_LABEL: "box", schema.TAG_DEVICE_NAME: device_name("cpu")}
    with RunSession("peaks", experiment="early", tags=tags) as peaks:
        peaks.log_metrics({"peak_flops_per_s_fp32": 1e11, "peak_dram_bytes_per_s": 2e10})
    capsys.readouterr()
    assert analyze(["--experiment", "early", "--out", str(tmp_path / "r"), "--jobs", "1"]) == 0
    assert "drawing roofline.png for 1 train run(s)" in capsys.readouterr().err
    after = client.get_run(run.info.run_id)
    m, t = after.data.metrics, after.data.tags
    intensity = m["modeled_intensity_flops_per_byte"]
    truth = m["achieved_flops_per_s"] / min(intensity * 2e10, 1e11)  # hand-computed roof
    assert m["fraction_of_roof"] == pytest.approx(truth)
    assert t["bound"] == ("memory-bound" if intensity < 1e11 / 2e10 else "compute-bound")
    assert t["roofline_roof"] == f"measured: peaks run {peaks.run_id[:8]}"
    lines = t[schema.TAG_NOTE].splitlines()
    assert lines[0] == run.data.tags[schema.TAG_NOTE].splitlines()[0]  # the summary stays first
    assert (
        lines[1].startswith(f"Roofline: {t['bound']}, ") and "% of roof at its modeled" in lines[1]
    )
    assert sum(x.startswith("Roofline: ") for x in lines) == 1
    png = mlflow.artifacts.download_artifacts(f"runs:/{run.info.run_id}/roofline.png")
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    # a second analysis finds nothing to redraw (the cached run still carries the old tag)
    again = ["--experiment", "early", "--out", str(tmp_path / "r2"), "--jobs", "1"]
    assert analyze([*again, "--variability-config", "nope"]) == 0
    err = capsys.readouterr().err
    assert "drawing roofline.png" not in err
    # issue 24 item 5: the cache's housekeeping note comes after what the runs lack, not first
    notes = [x for x in err.splitlines() if x.startswith("note: ")]
    assert notes[0].startswith("note: --variability-config nope: no train run has that")
    assert notes[-1].startswith("note: runs read through the local cache")
