"""The breakdown runs analysis reads (`python -m profiling --breakdown`, docs/breakdown.md).

One search for FINISHED `breakdown` runs in the query's experiments (and env labels), through the
run cache like every search, the latest per (env_label, device_name, config_key), and two small
artifacts of each, read uncached like the complexity tables: `breakdown.json` (the step's parts)
and `layers.csv` (the rows).
"""

from __future__ import annotations

import json

from common import console, schema
from common.errors import one_line
from common.fmt import short_id

SUMMARY = "breakdown.json"
LAYERS = "layers.csv"


COLUMNS = {
    "env_label": f"tags.{schema.TAG_ENV_LABEL}",
    "device_name": f"tags.{schema.TAG_DEVICE_NAME}",
    "config_key": f"tags.{schema.TAG_CONFIG_KEY}",
}


def breakdown_runs(query, source=None):
    """The FINISHED breakdown runs of the query's experiments (and env labels), latest first: the
    search's frame with the COLUMNS filled ('' where a run lacks one)."""
    return finished_of_kind("breakdown", query, source, COLUMNS)


def finished_of_kind(kind: str, query, source, cols: dict[str, str]):
    """The FINISHED runs of run kind `kind` in the query's experiments (and env labels), latest
    first, through the run cache: the search's frame with the tag columns `cols` filled ('' where
    a run lacks one). Breakdown and what-if runs (analysis/fetch/whatifs.py) are read so."""
    from analysis.fetch import Source, experiment_ids

    source = source or Source()
    df = source.search(
        experiment_ids(query.experiments),
        f"tags.{schema.TAG_RUN_KIND} = '{kind}' AND attributes.status = 'FINISHED'",
        query.max_runs,
    )
    if df.empty:
        return df
    for c in cols.values():
        if c not in df:
            df[c] = ""
    df = df.fillna({c: "" for c in cols.values()})
    if query.env_labels:
        df = df[df[cols["env_label"]].isin(query.env_labels)]
    return df


def fetch_breakdowns(query, source=None, notes: list[str] | None = None) -> list[dict]:
    """[{run_id, env_label, device_name, config_key, params: {...}, summary: dict, layers: csv
    text}] of the latest breakdown run per (env_label, device_name, config_key). A run whose
    artifacts cannot be read is a line appended to `notes`, never an error."""
    notes = [] if notes is None else notes
    df = breakdown_runs(query, source)
    if df.empty:
        return []
    latest = df.groupby(list(COLUMNS.values()), sort=True).head(1)  # the latest first
    out = read(latest.to_dict("records"), notes)
    console.info(f"fetched {len(out)} breakdown run(s)")
    return out


def read(records: list[dict], notes: list[str]) -> list[dict]:
    """fetch_breakdowns' dicts of the breakdown runs `records` (rows of breakdown_runs), their two
    artifacts read; a run whose artifacts cannot be read is a line in `notes`."""
    from analysis.fetch import _download_text

    out = []
    for r in records:
        try:
            summary = json.loads(_download_text(r["run_id"], SUMMARY))
            layers = _download_text(r["run_id"], LAYERS)
        except Exception as exc:  # noqa: BLE001 - missing artifact, bad JSON, server error
            notes.append(
                f"breakdown run {short_id(r['run_id'])} ({r[COLUMNS['env_label']] or 'no env_label'}) has "
                f"no readable {SUMMARY} or {LAYERS} ({one_line(exc)[:160]}): not in the report"
            )
            continue
        params = {k[len("params.") :]: v for k, v in r.items() if k.startswith("params.")}
        out.append(
            {
                "run_id": r["run_id"],
                **{name: str(r[c]) for name, c in COLUMNS.items()},
                "params": params,
                "summary": summary,
                "layers": layers,
            }
        )
    return out
