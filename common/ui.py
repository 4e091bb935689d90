"""What a person's browser shows first: the links the commands print (the model-training view, the
saved view of the train runs), the experiment marks behind them, and `run_name`, which names every
run of the project.

MLflow 3.17's UI (read from its JavaScript bundle; docs/ui.md):
- `workflowType=machine_learning` in the URL shows the "Model training" side bar and pages; without
  it the browser's last choice, and in a fresh browser GenAI (an experiment's own page then opens
  its GenAI Overview). Every link the project prints carries it.
- the experiment tag `mlflow.experimentKind` (`custom_model_development`) is the experiment's kind
  as the UI's kind selector shows and sets it; the open-source 3.17.2 build derives the kind it acts
  on from workflowType instead (its `Z0()` flag is hard-wired on), so the tag alone does not change
  what a fresh browser opens there. The project writes it all the same: the kind selector shows it.
- the runs page reads `viewStateShareKey=<key>` from its URL and takes the view kept in the
  experiment tag `mlflow.sharedViewState.<key>` (JSON): the search facets (filter, sort) and the
  table's state (visible columns, their order and widths, Group by). A URL alone carries only the
  filter and the sort; the columns otherwise live in the browser's local storage.

Marking writes two experiment tags, once per process and experiment, only when they differ; a
store that refuses them costs a line, never the run (the link then falls back to filter and sort).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from urllib.parse import urlencode

from common import console, fmt, schema
from common.errors import one_line
from common.server import display_uri, redact

TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_DEVELOPMENT = "custom_model_development"
"""the value of `mlflow.experimentKind` that opens an experiment on its runs table"""
KEEP_KINDS = ("genai_development", "finetuning", "forecasting", "classification", "regression")
"""kinds a user (or Databricks AutoML) chose explicitly: left as they are. The UI's own guesses
(`*_inferred`, `no_inferred_type`), "" and `automl` are replaced."""

VIEW_KEY = "train-fastest"
TAG_VIEW = f"mlflow.sharedViewState.{VIEW_KEY}"
"""the experiment tag holding the view the printed link opens"""
RUNS_VIEW_SORT = "throughput_samples_per_s"
"""the metric the runs view a command links to is sorted by, fastest first"""
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUNS_VIEW_COLUMNS = {
    f"metrics.`{RUNS_VIEW_SORT}`": 120,
    "metrics.`step_time_mean_s`": 100,
    "metrics.`fraction_of_roof_pct`": 90,
    "tags.`bound`": 110,
}
"""the columns (MLflow's column ids) the view shows after the run name, and their widths in px"""
RUN_NAME_WIDTH_PX = 300

PERCENT_OF = ("fraction_of_roof", "scaling_efficiency")
"""fractions the pages print as percentages: each is logged with `<name>_pct` beside it"""

WORKFLOW_ML = "machine_learning"
ML_VIEW = f"workflowType={WORKFLOW_ML}"
"""what every link the project prints ends with: MLflow 3.17.2 chooses the side bar and an
experiment's first page from it (or from the browser's last choice; a fresh browser: GenAI)"""

_marked: dict[str, bool] = {}  # "<tracking uri> <experiment id>" -> whether the tags are there


def runs_view_state(run_kind: str = "train") -> dict:
    """The view the link opens: runs of `run_kind`, fastest first, the key numbers beside the
    names and the name column wide enough for whole names."""
    return {
        "searchFilter": f"tags.{schema.TAG_RUN_KIND} = '{run_kind}'",
        "orderByKey": f"metrics.`{RUNS_VIEW_SORT}`",
        "orderByAsc": False,
        "selectedColumns": list(RUNS_VIEW_COLUMNS),
        "columnOrder": [RUN_NAME_COLUMN, *RUNS_VIEW_COLUMNS],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH_PX, **RUNS_VIEW_COLUMNS},
    }


def experiment_tags(current: dict[str, str]) -> dict[str, str]:
    """The tags to write to an experiment that has `current`: the model-development mark (unless a
    user chose a kind) and the saved view, each only when it differs."""
    want = {TAG_VIEW: json.dumps(runs_view_state(), sort_keys=True)}
    if current.get(TAG_EXPERIMENT_KIND) not in KEEP_KINDS:
        want[TAG_EXPERIMENT_KIND] = MODEL_DEVELOPMENT
    return {k: v for k, v in want.items() if current.get(k) != v}


def mark_experiment(client, experiment_id: str) -> bool:
    """Mark `experiment_id` as model development and give it the saved view (through `client`, an
    MlflowClient), once per process; False, with one line said, when the store refuses."""
    key = f"{display_uri()} {experiment_id}"
    if key not in _marked:
        try:
            exp = client.get_experiment(experiment_id)
            for name, value in experiment_tags(dict(exp.tags)).items():
                client.set_experiment_tag(experiment_id, name, value)
            _marked[key] = True
        except Exception as exc:  # noqa: BLE001 - the run matters more than how the UI opens
            console.note(
                f"experiment {experiment_id} keeps MLflow's default view ({redact(one_line(exc))[:160]}): "
                "the link below shows the train runs without the chosen columns"
            )
            _marked[key] = False
    return _marked[key]


def runs_view_path(experiment_id: str, saved_view: bool = True) -> str:
    """The UI path of an experiment's train runs, fastest first, with the project's columns when
    the experiment holds the saved view (`saved_view`), else with only the filter and the sort a
    URL can carry (the experiment page ignores the saved view when the URL has either)."""
    query = {"workflowType": WORKFLOW_ML}
    if saved_view:
        query = {"viewStateShareKey": VIEW_KEY, **query}
    else:
        state = runs_view_state()
        query = {k: state[k] for k in ("searchFilter", "orderByKey")} | query
        query["orderByAsc"] = "false"
    return f"#/experiments/{experiment_id}/runs?{urlencode(query)}"


def runs_view_hint(experiment_id: str | None) -> str:
    """Where to see every train run of the experiment, fastest first ('' without an experiment)."""
    if not experiment_id:
        return ""
    saved = _marked.get(f"{display_uri()} {experiment_id}", True)
    return f"train runs fastest first: {server_base()}/{runs_view_path(experiment_id, saved)}"


def server_base() -> str:
    """The UI's address: the tracking server's, or `mlflow ui`'s default for a local store."""
    uri = display_uri()
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"


def ui_hint(run_id: str | None, experiment_id: str | None) -> str:
    """How to look at a run: the UI command for a local store, the URL for a server."""
    uri = display_uri()
    path = f"#/experiments/{experiment_id}/runs/{run_id}?{ML_VIEW}" if run_id else ""
    if uri.startswith(("http://", "https://")):
        return f"see {uri.rstrip('/')}/{path}"
    return f"see it with `mlflow ui --backend-store-uri {uri}`, then http://127.0.0.1:5000/{path}"


def run_name(
    identity: Sequence[str], device: str | None = None, repeat: int | None = None, kind: str = ""
) -> str:
    """The one way a run is named: `kind` (none for a train run), the knobs that tell
    configurations apart (`identity`, those that differ most often first), the device, `r<repeat>`
    for a sweep's repeats, joined by '-': `b2-fp32-32px-resnet18-cpu`,
    `ddp-2proc-b2-fp32-32px-resnet18-gloo-cpu`, `breakdown-b2-fp32-32px-resnet18-cpu`,
    `b2-fp32-32px-resnet18-cpu-r0`. The UI cuts names at about 22 characters (runs table, Group
    by): runs of different kinds or configurations differ within the first 20."""
    parts = [kind, *identity, device or "", f"r{repeat}" if repeat is not None else ""]
    return "-".join(p for p in parts if p)


def with_percents(metrics: dict[str, float]) -> dict[str, float]:
    """`metrics` and, beside each finite fraction of PERCENT_OF, `<name>_pct`: 100 x it rounded to
    0.1, as pages print it (common.fmt.pct) (the runs table shows a metric's every digit: 71.6, not 0.71571...)."""
    pct = {
        f"{k}_pct": float(fmt.pct(metrics[k]).rstrip("%"))  # exactly the page's number
        for k in PERCENT_OF
        if k in metrics and math.isfinite(metrics[k])
    }
    return {**metrics, **pct}
