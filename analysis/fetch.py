"""The one analysis module that reads MLflow: runs and metric series from MLFLOW_TRACKING_URI.

Works the same against the embedded sqlite store and a remote `mlflow server`: everything goes
through `mlflow.search_runs` (which pages through the server's results, `max_results` at most)
and `MlflowClient.get_metric_history`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import pandas as pd

from common import console, schema
from common.errors import BenchError, UsageError, one_line
from common.tracking import tracking_uri


@dataclass
class Query:
    """Which runs to analyse."""

    experiments: list[str] = field(default_factory=list)
    """experiment names; empty = every experiment on the server."""
    filter: str = ""
    """MLflow search filter applied to the train runs (e.g. "params.model = 'resnet18'")."""
    env_labels: list[str] = field(default_factory=list)
    """keep train runs with these env_label tags; empty = all."""
    max_runs: int = 10000
    """at most this many train runs (the latest first)."""

    def __post_init__(self) -> None:
        if int(self.max_runs) <= 0:
            raise ValueError(f"max_runs must be a positive integer, got {self.max_runs}")
        self.max_runs = int(self.max_runs)
        self.filter = (self.filter or "").strip()
        self.experiments = [e for e in self.experiments if e]
        self.env_labels = [e for e in self.env_labels if e]

    def describe(self) -> str:
        exps = ", ".join(self.experiments) if self.experiments else "all experiments"
        parts = [exps]
        if self.filter:
            parts.append(f'filter "{self.filter}"')
        if self.env_labels:
            parts.append(f"env label(s) {', '.join(self.env_labels)}")
        return "; ".join(parts)


def _search(experiment_ids: list[str] | None, filter_string: str, max_results: int) -> pd.DataFrame:
    import mlflow

    try:
        return mlflow.search_runs(
            experiment_ids=experiment_ids,
            filter_string=filter_string,
            max_results=max_results,
            order_by=["attributes.start_time DESC"],
            search_all_experiments=experiment_ids is None,
            output_format="pandas",
        )
    except Exception as exc:  # noqa: BLE001 - connection errors, server-side rejections
        msg = one_line(exc)
        if getattr(exc, "error_code", "") == "INVALID_PARAMETER_VALUE":
            raise UsageError(f'MLflow rejected the search "{filter_string}": {msg}') from exc
        raise BenchError(f"cannot search runs on {mlflow.get_tracking_uri()}: {msg}") from exc


def check_filter(filter_string: str) -> None:
    """Parse `filter_string` with MLflow's own parser (locally) so a typo is a UsageError up front."""
    if not filter_string:
        return
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    try:
        SearchUtils.parse_search_filter(filter_string)
    except MlflowException as exc:
        raise UsageError(f'MLflow rejected the filter "{filter_string}": {exc.message}') from exc


def experiment_ids(names: list[str]) -> list[str] | None:
    """IDs of the named experiments (None = all); a name that does not exist is a UsageError."""
    if not names:
        return None
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    ids, missing = [], []
    try:
        for name in names:
            exp = client.get_experiment_by_name(name)
            (ids.append(exp.experiment_id) if exp is not None else missing.append(name))
        known = [e.name for e in client.search_experiments(max_results=20)] if missing else []
    except Exception as exc:  # noqa: BLE001 - unreachable server, bad URI
        raise BenchError(f"cannot read experiments from {tracking_uri()}: {one_line(exc)}") from exc
    if missing:
        raise UsageError(
            f"no experiment named {', '.join(map(repr, missing))} on this tracking server; "
            f"existing: {', '.join(known) or 'none'}"
        )
    return ids


def fetch_runs(query: Query) -> tuple[pd.DataFrame, list[str]]:
    """All train runs matching `query` (any status) plus the profile and peaks runs of the same
    experiments (not filtered: they join by config_key and device), each search capped at
    `query.max_runs` (a note when a cap is hit). Returns (runs, notes)."""
    notes: list[str] = []
    check_filter(query.filter)
    ids = experiment_ids(query.experiments)
    kind = f"tags.{schema.TAG_RUN_KIND}"
    base = [f"{kind} = 'train'"] + ([query.filter] if query.filter else [])
    labels = query.env_labels or [None]
    frames = []
    remaining = query.max_runs
    for label in labels:
        clauses = base + (
            [f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(label, 'env label')}"]
            if label
            else []
        )
        df = _search(ids, " AND ".join(clauses), remaining)
        console.info(f"fetched {len(df)} train run(s)" + (f" for env {label}" if label else ""))
        frames.append(df)
        remaining -= len(df)
        if remaining <= 0:
            notes.append(
                f"stopped at --max-runs {query.max_runs} train runs (latest first); raise it to see older runs"
            )
            break
    for other in ("profile", "peaks"):
        df = _search(ids, f"{kind} = '{other}'", query.max_runs)
        console.info(f"fetched {len(df)} {other} run(s)")
        if len(df) >= query.max_runs:
            notes.append(
                f"stopped at --max-runs {query.max_runs} {other} runs (latest first): older {other} runs "
                "were not read; raise --max-runs to use them"
            )
        frames.append(df)
    frames = [f for f in frames if not f.empty]
    runs = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
    if not runs.empty:
        runs = runs.drop_duplicates("run_id").reset_index(drop=True)
    return runs, notes


COMPLEXITY_CSV = (
    "complexity/models.csv"  # the stable per-model table of a `complexity` run (docs/complexity.md)
)


def fetch_complexity(query: Query) -> tuple[list[dict], list[str]]:
    """The `complexity/models.csv` artifact of the latest FINISHED `complexity` run per env_label in
    the query's experiments (and env labels). One search, usually empty; a download per environment
    that has such a run. Returns ([{run_id, env_label, device_name, device_memory_source, csv}], notes)."""
    ids = experiment_ids(query.experiments)
    kind = f"tags.{schema.TAG_RUN_KIND}"
    df = _search(ids, f"{kind} = 'complexity' AND attributes.status = 'FINISHED'", query.max_runs)
    if df.empty:
        return [], []
    env_col, dev_col = f"tags.{schema.TAG_ENV_LABEL}", f"tags.{schema.TAG_DEVICE_NAME}"
    for c in (env_col, dev_col, "params.device_memory_source"):
        if c not in df:
            df[c] = ""
    df = df.fillna({env_col: "", dev_col: "", "params.device_memory_source": ""})
    if query.env_labels:
        df = df[df[env_col].isin(query.env_labels)]
    latest = df.groupby(env_col, sort=True).head(1)  # search_runs returns the latest first
    out, notes = [], []
    for r in latest.to_dict("records"):
        try:
            text = _download_text(r["run_id"], COMPLEXITY_CSV)
        except Exception as exc:  # noqa: BLE001 - missing artifact, server-side error
            notes.append(
                f"complexity run {r['run_id'][:8]} ({r[env_col] or 'no env_label'}) has no readable "
                f"{COMPLEXITY_CSV} ({one_line(exc)[:160]}): not in the report"
            )
            continue
        out.append(
            {
                "run_id": r["run_id"],
                "env_label": r[env_col],
                "device_name": r[dev_col],
                "device_memory_source": r["params.device_memory_source"],
                "csv": text,
            }
        )
    console.info(f"fetched {len(out)} complexity table(s)")
    return out, notes


def _download_text(run_id: str, path: str) -> str:
    """One small artifact as text (without MLflow's progress bar on stderr)."""
    import os
    import tempfile

    import mlflow

    bar = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    before = os.environ.get(bar)
    os.environ[bar] = "false"
    try:
        with tempfile.TemporaryDirectory(prefix="analysis-") as tmp:
            local = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=path, dst_path=tmp
            )
            with open(local, encoding="utf-8") as fh:
                return fh.read()
    finally:
        if before is None:
            os.environ.pop(bar, None)
        else:
            os.environ[bar] = before


def fetch_series(run_ids: list[str], key: str = "step_time_s") -> dict[str, list[float]]:
    """The per-step values of metric `key` for each run, ordered by step."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    out = {}
    for run_id in run_ids:
        hist = client.get_metric_history(run_id, key)
        out[run_id] = [m.value for m in sorted(hist, key=lambda m: (m.step, m.timestamp))]
    return out
