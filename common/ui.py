"""What a person's browser shows first: the links the commands print (the run, the saved view that
holds it), the experiment marks behind them, and `run_name`, which names every run of the project.

MLflow 3.17's UI (read from its JavaScript bundle; docs/ui.md):
- `workflowType=machine_learning` in the URL shows the "Model training" side bar and pages; without
  it the browser's last choice, and in a fresh browser GenAI (an experiment's own page then opens
  its GenAI Overview with a "Detect Issues" pop-over that takes one click). Every link the
  project prints carries it.
- the experiment tag `mlflow.experimentKind` (`custom_model_development`) is the experiment's kind
  as the UI's kind selector shows and sets it; the open-source 3.17.2 build derives the kind it acts
  on from workflowType instead (its `Z0()` flag is hard-wired on), so the tag alone does not change
  what a fresh browser opens there. The project writes it all the same: the kind selector shows it.
- saved views: the experiment tags `mlflow.sharedViewState.<key>`, each `{name, createdAt,
  updatedAt, state}` with the runs page's state as JSON text (filter, sort, visible columns, their
  order and widths): the Views menu lists them by name, and a link's `viewStateShareKey=<key>`
  opens one. One per run kind here (VIEWS). MLflow has no experiment-level default view: without
  a key the runs table shows the browser's last layout (a fresh browser: MLflow's default).
- the experiment's description (tag `mlflow.note.content`) is shown above every tab of the
  experiment page, the GenAI overview included: the commands write the views' links there (and
  the analysis its answer), unless a user wrote a description of their own.
- `mlflow.experiment.primaryMetric.name`: the chart view draws that metric first.

Marking writes the experiment's tags once per process, only those that differ; a store that
refuses them costs a line, never the run (the link then falls back to filter and sort). A saved
view under one of the project's keys that the project did not write (another user's) is left as
it is, with a line, and the links fall back the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
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

TAG_VIEW_DIGEST = "roofline_bench.view_digest"
"""prefix of the experiment tags `<prefix>.<view key>` holding a digest of the view the project
wrote under that key: a view that no longer matches it was saved over by someone else"""
RUNS_VIEW_SORT = "throughput_samples_per_s"
"""the metric the train runs' view is sorted by, fastest first"""
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUN_NAME_WIDTH_PX = 300
START_TIME = "attributes.start_time"
PRIMARY_METRIC = "mlflow.experiment.primaryMetric.name"
"""the experiment tag MLflow's chart view draws first (samples/s: no search box to type in)"""
TAG_NOTE = "mlflow.note.content"
"""an experiment's (or run's) description: the experiment page shows it above every tab"""


@dataclass(frozen=True)
class View:
    """A saved view of one run kind: the experiment tag `mlflow.sharedViewState.<key>` that
    MLflow's Views menu lists by `name` and a link opens (`viewStateShareKey=<key>`)."""

    key: str
    name: str
    kind: str
    columns: dict[str, int]
    """MLflow column id -> width px, after the run name"""
    order_by: str = START_TIME
    ascending: bool = False
    rank: int = 0
    """the Views menu lists the newest first: the higher, the higher up"""

    def state(self) -> dict:
        """The runs page state the view holds: runs of its kind, its sort, its columns."""
        return {
            "searchFilter": f"tags.{schema.TAG_RUN_KIND} = '{self.kind}'",
            "orderByKey": self.order_by,
            "orderByAsc": self.ascending,
            "selectedColumns": list(self.columns),
            "columnOrder": [RUN_NAME_COLUMN, *self.columns],
            "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH_PX, **self.columns},
        }

    def envelope(self) -> str:
        """The tag's value as MLflow 3.17 saves a view (its Views menu lists only these; the
        link's loader reads them too): name, createdAt, updatedAt, state as JSON text."""
        body = {"name": self.name, "createdAt": self.rank, "updatedAt": self.rank}
        return json.dumps({**body, "state": json.dumps(self.state(), sort_keys=True)})

    @property
    def tag(self) -> str:
        return f"mlflow.sharedViewState.{self.key}"


def _m(key: str) -> str:
    return f"metrics.`{key}`"


VIEWS = {
    "train": View(
        "train-fastest",
        "Train runs, fastest first",
        "train",
        {
            _m("samples_per_s"): 110,
            "tags.`bound`": 120,
            _m("fraction_of_roof_pct"): 150,
            _m("step_time_mean_ms"): 150,
        },
        order_by=_m(RUNS_VIEW_SORT),
        rank=6,
    ),
    "breakdown": View(
        "breakdowns",
        "Breakdowns: where a step's time goes",
        "breakdown",
        {"tags.`breakdown_largest`": 230, "tags.`breakdown_largest_3`": 560},
        rank=5,
    ),
    "analysis": View(
        "analyses",
        "Analyses and their reports",
        "analysis",
        {"tags.`analysis_fastest`": 460},
        rank=4,
    ),
    "peaks": View(
        "peaks",
        "Peaks: the measured ceilings",
        "peaks",
        {_m("peak_flops_per_s_fp32"): 120, _m("peak_dram_bytes_per_s"): 120},
        rank=3,
    ),
    "sweep": View("sweeps", "Sweeps", "sweep", {}, rank=2),
    "whatif": View("whatifs", "What-if runs: advice checked", "whatif", {}, rank=1),
}
"""the saved view of each run kind a command prints the link of"""
TAG_VIEW = VIEWS["train"].tag
"""the experiment tag holding the train runs' view (the link `python -m train` prints)"""

NOTE_SIGNATURE = (
    "_These links are written by dnn-roofline-bench's commands; edit this description and they "
    "leave it alone._"
)
"""ends the experiment description the commands write: a description without it is a user's"""

PERCENT_OF = ("fraction_of_roof", "scaling_efficiency")
"""fractions the pages print as percentages: each is logged with `<name>_pct` beside it"""
SHOWN = {
    "throughput_samples_per_s": ("samples_per_s", 1.0),
    "step_time_mean_s": ("step_time_mean_ms", 1e3),
}
"""rates logged beside themselves as the pages print them (3 significant figures, short names
that fit a runs-table header): the train runs' view shows these and sorts by the raw rate"""

WORKFLOW_ML = "machine_learning"
ML_VIEW = f"workflowType={WORKFLOW_ML}"
"""what every link the project prints ends with: MLflow 3.17.2 chooses the side bar and an
experiment's first page from it (or from the browser's last choice; a fresh browser: GenAI)"""

_marked: dict[str, bool] = {}  # "<tracking uri> <experiment id>" -> whether the tags are there


def runs_view_state(run_kind: str = "train") -> dict:
    """The view a link of `run_kind`'s runs opens (View.state)."""
    return VIEWS[run_kind].state()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_tag(view: View) -> str:
    return f"{TAG_VIEW_DIGEST}.{view.key}"


def _state_of(text: str):
    """The runs page state a saved view's tag holds: MLflow's envelope or a bare state."""
    state = json.loads(text)
    if isinstance(state, dict) and isinstance(state.get("state"), str):
        state = json.loads(state["state"])
    return state


def foreign_view(current: dict[str, str], view: View | None = None) -> bool:
    """True when the experiment holds, under `view`'s key (the train runs' by default), a view this
    project did not write: it differs from what its digest tag says was written, or (written
    before the digest tags existed) shows other runs or another order than the project's view."""
    view = view or VIEWS["train"]
    text = current.get(view.tag)
    if text is None or text == view.envelope():
        return False
    if digest_tag(view) in current:
        return current[digest_tag(view)] != _digest(text)
    try:
        state = _state_of(text)
    except ValueError:
        return True
    ours = view.state()
    return not isinstance(state, dict) or any(
        state.get(k) != ours[k] for k in ("searchFilter", "orderByKey")
    )


def experiment_note(experiment_id: str, answer: str = "") -> str:
    """The experiment's description the commands write: a link to each kind's view (relative:
    the experiment page shows it on every tab, the GenAI overview of a fresh browser included),
    `answer` (what the latest analysis found) and the signature that marks it as theirs."""
    links = " · ".join(
        f"[{VIEWS[k].name}]({runs_view_path(experiment_id, kind=k)})"
        for k in ("train", "breakdown", "analysis", "peaks")
    )
    return "\n\n".join(p for p in (answer, links, NOTE_SIGNATURE) if p)


def _ours(note: str | None) -> bool:
    return not (note or "").strip() or (note or "").rstrip().endswith(NOTE_SIGNATURE)


def experiment_tags(current: dict[str, str], experiment_id: str = "") -> dict[str, str]:
    """The tags to write to an experiment that has `current`: the model-development mark (unless a
    user chose a kind), the saved views with their digests (except one another user saved under
    the same key: foreign_view), the chart view's primary metric (unless one is set), and, with
    `experiment_id`, the description with the views' links (unless a user wrote one), each only
    when it differs. An answer the analysis put in the description is kept."""
    want = {}
    for v in VIEWS.values():
        if not foreign_view(current, v):
            want |= {v.tag: v.envelope(), digest_tag(v): _digest(v.envelope())}
    if current.get(TAG_EXPERIMENT_KIND) not in KEEP_KINDS:
        want[TAG_EXPERIMENT_KIND] = MODEL_DEVELOPMENT
    if not current.get(PRIMARY_METRIC):
        want[PRIMARY_METRIC] = RUNS_VIEW_SORT
    note = current.get(TAG_NOTE)
    if experiment_id and _ours(note):
        want[TAG_NOTE] = experiment_note(experiment_id, _answer_of(note))
    return {k: v for k, v in want.items() if current.get(k) != v}


def _answer_of(note: str | None) -> str:
    """The answer paragraph of a description the commands wrote ('' when none)."""
    first = (note or "").split("\n\n", 1)[0]
    return first if first.startswith(ANSWER_MARK) else ""


ANSWER_MARK = "**Latest analysis**"
"""starts the paragraph of the experiment description that the latest analysis writes"""


def mark_experiment(client, experiment_id: str) -> bool:
    """Mark `experiment_id` as model development and give it the saved views and the description
    with their links (through `client`, an MlflowClient), once per process; False, with one line
    said, when the store refuses."""
    key = f"{display_uri()} {experiment_id}"
    if key not in _marked:
        try:
            current = dict(client.get_experiment(experiment_id).tags)
            for name, value in experiment_tags(current, experiment_id).items():
                client.set_experiment_tag(experiment_id, name, value)
            foreign = [v.key for v in VIEWS.values() if foreign_view(current, v)]
            _marked[key] = not foreign
            for view_key in foreign:
                console.note(
                    f"experiment {experiment_id} holds a saved view {view_key!r} this project did "
                    "not write (another user's?): left as it is; the links show the runs without "
                    "the chosen columns"
                )
        except Exception as exc:  # noqa: BLE001 - the run matters more than how the UI opens
            console.note(
                f"experiment {experiment_id} keeps MLflow's default view ({redact(one_line(exc))[:160]}): "
                "the link below shows the train runs without the chosen columns"
            )
            _marked[key] = False
    return _marked[key]


def set_answer(client, experiment_id: str, answer: str) -> None:
    """Put `answer` (one paragraph starting with ANSWER_MARK) at the top of the experiment's
    description, when the description is the commands' own; a store that refuses costs a line."""
    try:
        note = dict(client.get_experiment(experiment_id).tags).get(TAG_NOTE)
        if _ours(note):
            client.set_experiment_tag(
                experiment_id, TAG_NOTE, experiment_note(experiment_id, answer)
            )
    except Exception as exc:  # noqa: BLE001 - the analysis stands without it
        console.note(
            f"experiment {experiment_id}'s description keeps its text ({redact(one_line(exc))[:160]})"
        )


def runs_view_path(experiment_id: str, saved_view: bool = True, kind: str = "train") -> str:
    """The UI path of an experiment's runs of `kind` in their saved view, or, when the experiment
    does not hold it (`saved_view` False), with only the filter and the sort a URL can carry (the
    experiment page ignores the saved view when the URL has either)."""
    query = {"workflowType": WORKFLOW_ML}
    if saved_view:
        query = {"viewStateShareKey": VIEWS[kind].key, **query}
    else:
        state = runs_view_state(kind)
        query = {k: state[k] for k in ("searchFilter", "orderByKey")} | query
        query["orderByAsc"] = "false"
    return f"#/experiments/{experiment_id}/runs?{urlencode(query)}"


def runs_view_hint(experiment_id: str | None, kind: str = "train") -> str:
    """Where to see every run of `kind` of the experiment, in its view ('' without an
    experiment): `train runs fastest first: <url>`."""
    if not experiment_id:
        return ""
    saved = _marked.get(f"{display_uri()} {experiment_id}", True)
    return (
        f"{VIEWS[kind].name.lower()}: {server_base()}/{runs_view_path(experiment_id, saved, kind)}"
    )


def say_links(kind: str, run_id: str | None, experiment_id: str | None, artifact: str = "") -> None:
    """What every command ends with: the link to its own run (or to its `artifact`, the analysis's
    report) and the link to the view that holds it (its kind's saved view). The one
    link-printing function: train, breakdown, peaks, analysis, sweep, complexity and whatif call
    it."""
    if run_id:
        console.result(ui_hint(run_id, experiment_id, artifact))
    hint = runs_view_hint(experiment_id, kind) if kind in VIEWS else ""
    if hint:
        console.result(hint)


def server_base() -> str:
    """The UI's address: the tracking server's, or `mlflow ui`'s default for a local store."""
    uri = display_uri()
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"


def run_path(run_id: str, experiment_id: str | None, artifact: str = "") -> str:
    """The UI path of a run's page, or of one of its artifacts (`report/report.html`), in the
    model-training view."""
    tail = f"/artifacts/{artifact}" if artifact else ""
    return f"#/experiments/{experiment_id}/runs/{run_id}{tail}?{ML_VIEW}"


def ui_hint(run_id: str | None, experiment_id: str | None, artifact: str = "") -> str:
    """How to look at a run (or its `artifact`): the UI command for a local store, the URL for a
    server."""
    uri = display_uri()
    path = run_path(run_id, experiment_id, artifact) if run_id else ""
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
    0.1, as pages print it (common.fmt.pct) (the runs table shows a metric's every digit: 71.6,
    not 0.71571...); and beside each rate of SHOWN its value as the pages print it (3 significant
    figures: `samples_per_s` 2.81, not 2.80684018652...), for the runs table's columns."""
    pct = {
        f"{k}_pct": float(fmt.pct(metrics[k]).rstrip("%"))  # exactly the page's number
        for k in PERCENT_OF
        if k in metrics and math.isfinite(metrics[k])
    }
    shown = {
        name: float(fmt.num(metrics[k] * scale))
        for k, (name, scale) in SHOWN.items()
        if k in metrics and math.isfinite(metrics[k]) and metrics[k] > 0
    }
    return {**metrics, **pct, **shown}
