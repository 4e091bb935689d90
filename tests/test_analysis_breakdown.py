"""The report's breakdown section (analysis/breakdown.py) from breakdown runs logged by hand.

Three breakdown runs of environment l4 (next to the train runs of tests/test_analysis_end_to_end's
store): resnet18 b32 fp32, b64 fp32 and b64 bf16. b32 -> b64 (fp32) and fp32 -> bf16 (b64) differ
in one field each and are compared; b32 fp32 and b64 bf16 differ in two and are not. The shares
below are made up so that every cell of the report can be checked by eye.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis import breakdown, screen
from common import schema
from common.tracking import RunSession
from profiling.breakdown.names import PARTS
from tests.test_analysis_end_to_end import EXP, L4, analyse, env_tags, params, store  # noqa: F401

LAYER_COLUMNS = "module,phase,kind,depth,leaf,view,calls,time_s,self_time_s,share,flops,bytes"


def layers_csv(shares: dict[tuple[str, str], float], step_s: float) -> str:
    lines = [LAYER_COLUMNS]
    for (module, phase), share in shares.items():
        t = share * step_s
        lines.append(f"{module},{phase},module,1,False,True,1,{t},{t},{share},1e9,1e8")
    return "\n".join(lines) + "\n"


def log_breakdown(batch, precision, step_s, parts, shares, *, bad_step=False):
    p = params(batch, precision)
    tags = {**env_tags("l4", L4), schema.TAG_CONFIG_KEY: schema.config_key(p)}
    metrics = {"breakdown_step_s": math.nan if bad_step else step_s}
    for part in PARTS:
        metrics[f"breakdown_{part}_s"] = parts.get(part, 0.0) * step_s
        metrics[f"breakdown_{part}_fraction"] = parts.get(part, 0.0)
    summary = {
        "config_label": f"resnet18/b{batch}/{precision}/224px",
        "metrics": metrics,
        "top": [
            {
                "module": m,
                "phase": ph,
                "share": s,
                "bound": "compute-bound",
                "intensity_flops_per_byte": 10.0,
            }
            for (m, ph), s in list(shares.items())[:1]
        ],
    }
    with RunSession("breakdown", experiment=EXP, tags=tags) as s:
        s.log_params(p)
        s.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        s.log_text("breakdown.json", json.dumps(summary).replace("NaN", "null"))
        s.log_text("layers.csv", layers_csv(shares, step_s))
    return s.run_id


def test_section_compares_runs_that_differ_in_one_field(store, tmp_path):  # noqa: F811
    log_breakdown(
        32,
        "fp32",
        0.08,
        {"forward": 0.3, "backward": 0.6, "optimizer": 0.1},
        {("layer4", "backward"): 0.2},
    )
    log_breakdown(
        64,
        "fp32",
        0.1,
        {"forward": 0.25, "backward": 0.7, "optimizer": 0.05},
        {("layer4", "backward"): 0.3},
    )
    log_breakdown(
        64,
        "bf16",
        0.05,
        {"forward": 0.2, "backward": 0.5, "optimizer": 0.1, "host_overhead": 0.2},
        {("layer4", "backward"): 0.1},
    )
    res = analyse(tmp_path)
    out = tmp_path / "out"
    runs = pd.read_csv(out / "breakdown_runs.csv")
    assert sorted(runs["config_label"]) == [
        "resnet18/b32/fp32/224px",
        "resnet18/b64/bf16/224px",
        "resnet18/b64/fp32/224px",
    ]
    shifts = pd.read_csv(out / "breakdown_shifts.csv").sort_values("field")
    assert list(shifts["field"]) == ["batch_size", "precision"]
    batch = shifts.iloc[0]
    assert (batch["from"], batch["to"]) == (
        "32",
        "64",
    )  # read back as text: precision shares the column
    assert batch["from_backward_fraction"] == 0.6 and batch["to_backward_fraction"] == 0.7
    assert batch["mover"] == "layer4 backward" and batch["mover_to_share"] == pytest.approx(0.3)
    prec = shifts.iloc[1]
    assert (prec["from"], prec["to"]) == ("fp32", "bf16")  # fp32 first
    layers = pd.read_csv(out / "breakdown_layers.csv")
    assert len(layers) == 3 and set(layers["env_label"]) == {"l4"}
    md = (out / "report.md").read_text()
    section = md.split("## Where the step's time goes")[1].split("\n## ")[0]
    assert (
        "| l4 | resnet18 | batch_size 32 → 64 | 80 → 100 | 30.0% → 25.0% | 60.0% → 70.0% |"
        in section
    )
    assert "layer4 backward 20.0% → 30.0%" in section
    assert "| l4 | resnet18 | precision fp32 → bf16 | 100 → 50 |" in section
    assert "`figures/breakdown_parts.png`" in section
    assert md.index("## Where the step's time goes") < md.index("## Model complexity")
    assert (out / "figures" / "breakdown_parts.png").read_bytes()[:4] == b"\x89PNG"
    assert not any("breakdown" in n for n in res.notes)


def test_a_run_with_a_bad_step_time_is_left_out_with_a_note(store, tmp_path):  # noqa: F811
    log_breakdown(
        32, "fp32", 0.08, {"forward": 0.5, "backward": 0.5}, {("fc", "forward"): 0.1}, bad_step=True
    )
    res = analyse(tmp_path)
    assert any(
        "breakdown_step_s None is not a positive step time (missing): left out" in n
        for n in res.analysis.notes
    )
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Where the step's time goes\n\nNo `breakdown` run" in md


def test_build_leaves_out_bad_layer_rows_and_blank_shares():
    good = {"breakdown_step_s": 0.1, **{f"breakdown_{p}_fraction": 0.0 for p in PARTS}}
    good["breakdown_forward_fraction"] = -0.5  # a share cannot be negative
    fetched = [
        {
            "run_id": "a" * 32,
            "env_label": "e",
            "device_name": "d",
            "config_key": "k",
            "params": {"model": "resnet18", "batch_size": "8"},
            "summary": {"config_label": "resnet18/b8", "metrics": good},
            "layers": "module,phase,time_s,share\nconv1,forward,0.01,0.1\nfc,forward,inf,0.1\nbn1,forward,-1,0.1\n",
        }
    ]
    fetched, lines = screen.breakdowns(fetched)  # the one value gate, as app does
    b = breakdown.build(fetched)
    assert len(b.runs) == 1 and math.isnan(b.runs.iloc[0]["forward_fraction"])
    assert list(b.layers["module"]) == ["conv1"]
    assert any("breakdown_forward_fraction -0.5 is negative: left blank" in n for n in lines)
    assert any("2 layers.csv row(s) with a time or share that is not finite" in n for n in lines)
