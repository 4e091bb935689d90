"""roofline.png for train runs made before their device had ceilings.

A train run draws its own roofline.png when it ends (train/roofline_figure.py), against the
latest peaks run of its device, else the vendor table. The usual order is the other one: train
runs first, the peaks run later; and a peaks run measured later replaces vendor ceilings. So
`python -m analysis` (when it logs to the tracking server) brings each train run it read up to
date: a run whose `roofline_roof` tag names other ceilings than the ones analysis now holds its
point against gets roofline.png redrawn, tags `roofline_roof` and `bound`, metric
`fraction_of_roof` and the 'Roofline: ' line of its description, exactly as a run made after
the peaks run gets them at train time (roofline.run_plot.run_figure).

Why at analysis time and not a ceiling probe at train time: a probe of a few seconds would put a
noisy ceiling on every run (a peaks run takes minutes to be worth its name) and slow every run of a
sweep; the vendor table already gives a run its figure at train time where the device is known,
and analysis is the step that already joins runs with the device's measured ceilings.

`plan` is pure; `apply` is the only function that writes to the tracking server. The local cache
of fetched runs does not see tag changes (analysis/fetch/__init__.py search_cached), so the runs done are
kept in a small ledger beside it and not redone at each analysis.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from common.ui import with_percents
from common.errors import one_line
from common.runs import mlflow_client
from common.fmt import short_id
from roofline import run_plot
from roofline.model import Roof, is_finite_positive

MAX_PER_ANALYSIS = 200
"""figures drawn by one analysis (the newest runs first): a first analysis of a large store
spreads the work over several, and says how many are left"""
LEDGER = "run_rooflines.json"


@dataclass
class Redraw:
    """One train run's roofline to (re)draw against `roof`."""

    run_id: str
    roof: Roof
    precision: str
    achieved_flops_per_s: float
    intensity_flops_per_byte: float
    title: str

    @property
    def sources(self) -> str:
        return "; ".join(sorted(set(self.roof.sources.values())))


def plan(train: pd.DataFrame, roofs: dict, done: dict[str, str]) -> tuple[list[Redraw], int]:
    """(the runs to redraw, newest first, at most MAX_PER_ANALYSIS; how many more wait). A train
    run (a row of analysis.join.train_runs) is redrawn when its environment has a roof whose
    sources differ from its `roofline_roof` tag (and from `done`, the ledger: run id -> sources
    drawn) and it has an achieved FLOP/s and a modeled intensity to place."""
    todo: list[Redraw] = []
    for r in train.sort_values("start_time", ascending=False).to_dict("records"):
        roof = (roofs.get((r["env_label"], r["device_name"])) or {}).get("roof")
        achieved, intensity = _achieved(r), r["modeled_intensity_flops_per_byte"]
        if roof is None or roof.is_empty():
            continue
        if not (is_finite_positive(achieved) and is_finite_positive(intensity)):
            continue
        title = f"{r['config_label'] or r['model']} on {r['device_name']}"
        item = Redraw(r["run_id"], roof, r["precision"], achieved, intensity, title)
        if item.sources not in (r["roofline_roof"], done.get(r["run_id"])):
            todo.append(item)
    return todo[:MAX_PER_ANALYSIS], max(0, len(todo) - MAX_PER_ANALYSIS)


def _achieved(row: dict) -> float:
    """The run's achieved FLOP/s, derived from its work and mean step time when it lacks the metric."""
    achieved = row["achieved_flops_per_s"]
    if is_finite_positive(achieved):
        return achieved
    flops, mean = row["train_flops_per_step"], row["step_time_mean_s"]
    return flops / mean if is_finite_positive(flops) and is_finite_positive(mean) else math.nan


def apply(todo: list[Redraw], client=None) -> tuple[dict[str, str], list[str]]:
    """Draw and log each run's figure, tags, metric and description line: ({run id: sources}
    done, one note per run that could not be updated). Never raises for one run."""
    client = mlflow_client(client)
    done: dict[str, str] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for item in todo:
            try:
                _redraw(client, item, Path(tmp))
                done[item.run_id] = item.sources
            except Exception as exc:  # noqa: BLE001 - one run's failure is a note, not the analysis'
                notes.append(
                    f"train run {short_id(item.run_id)}: could not log its roofline.png ({one_line(exc)[:200]})"
                )
    return done, notes


def _redraw(client, item: Redraw, tmp: Path) -> None:
    figure = run_plot.run_figure(
        item.roof,
        item.precision,
        item.achieved_flops_per_s,
        item.intensity_flops_per_byte,
        item.title,
    )
    tags = client.get_run(item.run_id).data.tags
    folder = tmp / item.run_id
    folder.mkdir()
    (folder / "roofline.png").write_bytes(figure.png)
    client.log_artifact(item.run_id, str(folder / "roofline.png"))
    if run_plot.TAG_BOUND in tags and run_plot.TAG_BOUND not in figure.tags:
        client.delete_tag(item.run_id, run_plot.TAG_BOUND)  # drawn before, no bandwidth now
    for key, value in with_percents(figure.metrics).items():
        client.log_metric(item.run_id, key, value)
    note = run_plot.with_line(tags.get("mlflow.note.content", ""), figure.line)
    for key, value in {**figure.tags, "mlflow.note.content": note}.items():
        client.set_tag(item.run_id, key, value)


def load_ledger(folder: Path) -> dict[str, str]:
    """Run id -> sources of the figures earlier analyses drew ({} when none or unreadable)."""
    try:
        data = json.loads((folder / LEDGER).read_text())
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_ledger(folder: Path, ledger: dict[str, str]) -> str:
    """Write the ledger; '' or why it could not be written (the next analysis redraws those)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{LEDGER}.tmp"
        tmp.write_text(json.dumps(ledger, sort_keys=True))
        tmp.replace(folder / LEDGER)
        return ""
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
