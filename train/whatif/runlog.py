"""The `whatif` run (docs/schema.md, `whatif` runs): its predictions are logged and sent before any
counterfactual starts, its checks once they have run. A resumed what-if continues its run and reads
its predictions back from it: they are never made again, so nothing rewrites a prediction after
its check ran. Every check also compares the counterfactual runs' start times with the time the
predictions were logged: a run that started before is not judged.
"""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import datetime, timezone

from common import fmt, schema
from common.errors import UsageError
from common.runs import artifact_text
from roofline.scoring import VERDICTS, check_text
from roofline.whatif import Prediction

TAG_OF = "whatif_of"
"""the original run"""
TAG_SWEEP = "whatif_sweep"
"""the sweep that runs its counterfactuals (its name: the same command resumes it)"""
TAG_BREAKDOWN = "whatif_breakdown_run"
TAG_ROOF = "whatif_roof"
TAG_PREDICTED_AT = "whatif_predicted_at"
"""when the predictions were sent to the store (UTC, ISO 8601)"""
PREDICTED_AT_MS = "whatif_predicted_at_ms"
"""the same as a metric (ms since the epoch), what the checks compare run start times with"""
PREDICTIONS = "whatif/predictions.json"
TABLE_CSV = "whatif/table.csv"
TABLE_JSON = "whatif/table.json"
TABLE_COLUMNS = (
    "move",
    "knob",
    "from",
    "to",
    "predicted_low",
    "predicted_high",
    "measured",
    "measured_low",
    "measured_high",
    "verdict",
    "why",
    "original_samples_per_s",
    "move_samples_per_s",
    "original_runs",
    "move_runs",
    "assumes",
)
"""whatif/table.csv's columns: one row per move (runs: space-separated run ids)"""


def prediction_dict(p: Prediction) -> dict:
    """A prediction as the record keeps it (what a check and the report read back)."""
    return {
        "move": p.move.name,
        "knob": p.move.knob,
        "from": p.move.frm,
        "to": p.move.to,
        "predicted_low": p.low,
        "predicted_high": p.high,
        "assumes": p.assumes,
        "why_not": p.why_not,
        "shares": p.shares,
    }


def predictions_json(src, preds: list[Prediction], no_move: list[str], at_ms: int) -> str:
    """whatif/predictions.json: every move's prediction and what they rest on."""
    roof = src.roof
    return json.dumps(
        {
            "original_run": src.run_id,
            "config_label": src.cfg.config_label(),
            "device_name": src.device_name,
            "predicted_at_ms": at_ms,
            "breakdown_run": src.breakdown_run,
            "ceilings": {
                "flops_per_s": dict(roof.flops_per_s) if roof else {},
                "bytes_per_s": dict(roof.bytes_per_s) if roof else {},
                "sources": dict(roof.sources) if roof else {},
            },
            "batch_fit": vars(src.fit) if src.fit else None,
            "moves": [prediction_dict(p) for p in preds],
            "no_move": no_move,
            "notes": src.notes,
        },
        indent=1,
        default=str,
    )


def find(client, experiment_id: str, sweep_name: str, env_label: str):
    """The what-if run of this sweep and env label made by an earlier invocation, or None."""
    query = (
        f"tags.{schema.TAG_RUN_KIND} = 'whatif' and "
        f"tags.{TAG_SWEEP} = {schema.filter_literal(sweep_name, 'sweep name')} and "
        f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(env_label, 'env label')}"
    )
    runs = client.search_runs(
        [experiment_id], query, order_by=["attributes.start_time ASC"], max_results=5
    )
    return runs[0] if runs else None


def read_predictions(client, run) -> dict | None:
    """What an earlier invocation logged as predictions (None when it logged none)."""
    try:
        data = json.loads(artifact_text(run.info.run_id, PREDICTIONS, client))
    except Exception:  # noqa: BLE001 - none logged (killed before it sent them)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("moves"), list):
        raise UsageError(
            f"what-if run {run.info.run_id}: its {PREDICTIONS} is not a predictions record; "
            "start a new what-if (another --moves or --repeats names another one)"
        )
    return data


def log_predictions(session, src, preds: list[Prediction], no_move: list[str], extra: dict) -> dict:
    """Log and send the predictions (artifact, metrics, tags) now, before any counterfactual
    starts; returns the record as read back later."""
    at_ms = int(time.time() * 1000)
    text = predictions_json(src, preds, no_move, at_ms)
    session.log_text(PREDICTIONS, text)
    metrics = {PREDICTED_AT_MS: float(at_ms), **extra}
    for p in preds:
        if p.made:
            metrics[f"whatif_{p.move.name}_predicted_low"] = p.low
            metrics[f"whatif_{p.move.name}_predicted_high"] = p.high
    session.log_metrics(metrics)
    when = datetime.fromtimestamp(at_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    session.set_tags({TAG_PREDICTED_AT: when})
    session.flush()
    return json.loads(text)


def log_checks(session, rows: list[dict], note: str) -> None:
    """The checks: whatif/table.csv and .json, per move its measured speed-up, interval and
    verdict (metrics and tags), the counts per verdict, the description."""
    metrics = {
        f"whatif_{v.replace(' ', '_')}": float(sum(r["verdict"] == v for r in rows))
        for v in VERDICTS
    }
    tags = {}
    for r in rows:
        for k in ("measured", "measured_low", "measured_high"):
            if r[k] is not None:
                metrics[f"whatif_{r['move']}_{k}"] = r[k]
        tags[f"whatif_{r['move']}_verdict"] = r["verdict"]
    session.log_metrics(metrics)
    session.set_tags(tags)
    session.log_text(TABLE_CSV, table_csv(rows))
    session.log_text(TABLE_JSON, json.dumps(rows, indent=1, default=str))
    session.set_note(note)


def table_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(TABLE_COLUMNS)
    for r in rows:
        w.writerow([fmt.csv_cell(_cell(r.get(c))) for c in TABLE_COLUMNS])
    return buf.getvalue()


def _cell(v):
    return " ".join(v) if isinstance(v, (list, tuple)) else v


def table_text(rows: list[dict]) -> str:
    """The console's (and the docs') table: move, predicted interval, measured speed-up with its
    interval, verdict, the counterfactual runs."""
    lines = [
        "| move | predicted | measured (95% interval) | verdict | runs of the move |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["predicted_low"], r["predicted_high"]
        pred = f"x{lo:.3g}-{hi:.3g}" if lo is not None and hi is not None else "none"
        m = r["measured"]
        meas = "" if m is None else f"x{m:.3g}"
        if m is not None and r["measured_low"] is not None:
            meas += f" ({r['measured_low']:.3g}-{r['measured_high']:.3g})"
        runs = " ".join(fmt.short_id(i) for i in r["move_runs"])
        lines.append(f"| {r['move']} | {pred} | {meas} | {r['verdict']} | {runs} |")
    return "\n".join(lines)


def note(head: str, rows: list[dict], no_move: list[str]) -> str:
    """The what-if run's description: the counts, each move's check, why a move was not
    predicted or judged, the knobs without a move."""
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(r["verdict"] == v for r in rows)))
    lines = [f"{head}: {counts or 'no moves'}."]
    for r in rows:
        lines.append(
            check_text(
                r["move"],
                r["predicted_low"],
                r["predicted_high"],
                r["measured"],
                r["measured_low"],
                r["measured_high"],
                r["verdict"],
            )
            + (f" ({r['why']})" if r["verdict"] in ("not predicted", "not judged") else "")
        )
    lines += [f"No move: {line}." for line in no_move]
    return "\n".join(lines)
