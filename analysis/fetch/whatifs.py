"""The what-if runs analysis reads (`python -m train.whatif`, docs/whatif.md).

One search for FINISHED `whatif` runs in the query's experiments (and env labels), through the run
cache like every search, newest first, and each one's `whatif/table.json` (its checks as logged:
the report shows them as they are, never recomputed). "How good is the advice" counts every one;
a configuration's moves show the checks of its latest.
"""

from __future__ import annotations

import json

from analysis.fetch.breakdowns import COLUMNS, finished_of_kind
from common import console, fmt, schema
from common.errors import one_line

TABLE = "whatif/table.json"


def fetch_whatifs(query, source=None, notes: list[str] | None = None) -> list[dict]:
    """[{run_id, env_label, device_name, config_key, config_label, rows: [table rows]}]. A run
    whose table cannot be read is a line appended to `notes`, never an error."""
    from analysis.fetch import _download_text

    notes = [] if notes is None else notes
    cols = {**COLUMNS, "config_label": f"tags.{schema.TAG_CONFIG_LABEL}"}
    df = finished_of_kind("whatif", query, source, cols)
    if df.empty:
        return []
    out = []
    for r in df.to_dict("records"):
        try:
            rows = json.loads(_download_text(r["run_id"], TABLE))
            if not isinstance(rows, list):
                raise ValueError("not a list of rows")
        except Exception as exc:  # noqa: BLE001 - missing artifact, bad JSON, server error
            notes.append(
                f"what-if run {fmt.short_id(r['run_id'])} has no readable {TABLE} ({one_line(exc)[:160]}): "
                "its checks are not in the report"
            )
            continue
        out.append({"run_id": r["run_id"], **{k: str(r[c]) for k, c in cols.items()}, "rows": rows})
    console.info(f"fetched {len(out)} what-if run(s)")
    return out
