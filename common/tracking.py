"""Writing runs to MLflow: the run session, and the few writes to runs no session holds.

Every entry point (train, profile, peaks, analysis, sweep, complexity) records its results into a
`RunRecord` (plain, JSON-serialisable data) inside a `RunSession`. The session

* creates the MLflow run, or resumes the one `mlflow run` created (MLFLOW_RUN_ID);
* writes params and tags as soon as they are known and everything else with batched calls;
* ends the run FINISHED, or FAILED with a one-line `error` tag when the body raised;
* when the tracking server cannot be reached, keeps the whole record in a local spool file
  (common/spool.py) so that no measurement is lost; `python -m common.upload` (common/upload.py)
  sends spooled runs once the server is back, through the session's public `continue_run`,
  `create_run`, `send` and `terminate`.

Whether the server answers, and which one is in use, is common/server.py's. Only these modules (and
analysis/fetch.py, which reads) import mlflow.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import console, schema, spool
from common.errors import BenchError, one_line

# tracking_uri stays importable from here (common.tracking.tracking_uri) for callers that use it
from common.server import check_reachable, is_unreachable, tracking_uri

# Metric histories keep at most this many points per series (every k-th step beyond it, with the
# stride in the tag `<name>_stride`). MLflow's SQL store inserts ~0.2 ms of CPU per metric row, so
# 10,000 rows cost ~2 s; callers keep the full series as an artifact (see train/__main__.py).
MAX_SERIES_POINTS = 1000
# System metrics aim at this many samples over the sampled phase (see system_metrics_interval).
SYSTEM_SAMPLES = 30


def param_str(value: Any) -> str:
    """The string MLflow stores for a param; booleans lower-case like MLproject's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class RunRecord:
    """Everything a run logs, as plain data. Values are raw SI numbers, never rounded."""

    run_kind: str
    run_name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # per-step metrics: name -> values; the step index is the position in the list
    series: dict[str, list[float]] = field(default_factory=dict)
    # artifacts written from memory: artifact path ("dir/name.txt") -> text
    texts: dict[str, str] = field(default_factory=dict)
    # artifacts copied from disk: artifact path ("dir/name.csv") -> local file path
    files: dict[str, str] = field(default_factory=dict)
    # dataset inputs (the UI's Dataset column): dicts of `dataset_input`'s fields
    inputs: list[dict] = field(default_factory=list)

    def merge(self, other: "RunRecord") -> None:
        self.params.update(other.params)
        self.tags.update(other.tags)
        self.metrics.update(other.metrics)
        self.series.update(other.series)
        self.texts.update(other.texts)
        self.files.update(other.files)
        self.inputs.extend(i for i in other.inputs if i not in self.inputs)

    def is_empty(self) -> bool:
        return not (
            self.params
            or self.tags
            or self.metrics
            or self.series
            or self.texts
            or self.files
            or self.inputs
        )

    def validate(self) -> None:
        for key in [*self.params, *self.tags, *self.metrics, *self.series]:
            schema.check_key(key)


def dataset_input(name: str, digest: str, source_type: str, source: dict, context: str) -> dict:
    """A dataset input of a run, as plain data: `name` and `digest` (the UI's Dataset column),
    `source_type` ("local" for a folder, "code" for data a program makes), `source` (JSON-able: a
    folder's {"uri": ...}, generated data's description) and `context` (e.g. "train")."""
    return {
        "name": name,
        "digest": digest,
        "source_type": source_type,
        "source": source,
        "context": context,
    }


def context_tags(run_kind: str) -> dict[str, str]:
    """What `mlflow.start_run` adds and `MlflowClient.create_run` does not: `mlflow.user`,
    `mlflow.source.name|type`, `mlflow.source.git.commit|branch|repoURL` (MLflow's context
    providers), and `mlflow.project.entryPoint`, the MLproject entry point that runs `run_kind`."""
    tags = {schema.TAG_ENTRY_POINT: schema.ENTRY_POINTS[run_kind]}
    try:
        from mlflow.tracking.context.registry import resolve_tags

        tags.update(resolve_tags())
    except Exception as exc:  # noqa: BLE001 - provenance is a nice-to-have, never a failure
        console.note(f"source tags not resolved ({one_line(exc)[:200]})")
    return tags


def system_metrics_interval(expected_s: float | None) -> float | None:
    """Seconds between system-metric samples for a phase expected to last `expected_s`: about
    SYSTEM_SAMPLES samples, between 1 s and 60 s; 1 s when the length is unknown; None (do not
    sample) when the phase is shorter than two 1-second samples, which would hold only MLflow's
    first sample (CPU use since the previous psutil call) or none."""
    if expected_s is None:
        return 1.0
    if expected_s < 2.0:
        return None
    return min(60.0, max(1.0, expected_s / SYSTEM_SAMPLES))


def series_stride(n_points: int) -> int:
    """Every how many steps a series of `n_points` is logged as metric history."""
    return max(1, -(-n_points // MAX_SERIES_POINTS))


class RunSession:
    """A context manager around one MLflow run. See the module docstring.

    `parent` makes this a child run (sweeps). `system_metrics` samples CPU/GPU/memory/disk into the
    run from `start_system_metrics` until it ends (MLflow's system metrics monitor). A new run
    gets `context_tags` unless `source_tags` is false (an upload recreating a spooled run, whose
    record already holds the tags of the process that measured it).
    """

    def __init__(
        self,
        run_kind: str,
        *,
        experiment: str | None = None,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        parent: "RunSession | None" = None,
        system_metrics: bool = False,
        resume_env_run: bool = True,
        run_id: str | None = None,
        offline: bool = False,
        local_id: str | None = None,
        source_tags: bool = True,
    ) -> None:
        if run_kind not in schema.RUN_KINDS:
            raise ValueError(f"run_kind must be one of {schema.RUN_KINDS}, got {run_kind!r}")
        self.experiment = experiment
        self.parent = parent
        self.system_metrics = system_metrics
        self.resume_env_run = resume_env_run and parent is None
        self.resume_run_id = run_id  # an existing run to continue (a resumed sweep's parent)
        # `local_id` names the spool folder: passing a spooled run's id continues that entry.
        self.local_id = local_id or uuid.uuid4().hex
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        # offline=True: the caller already knows the server is unreachable; do not try it again.
        self.offline = offline
        self.children: list[RunSession] = []  # child sessions opened under this one, in order
        if parent is not None:
            parent.children.append(self)
        self.status: str | None = None
        self.error: str | None = None
        self.spool_path: Path | None = None
        base = {schema.TAG_RUN_KIND: run_kind}
        continuing = run_id or (self.resume_env_run and os.environ.get("MLFLOW_RUN_ID"))
        if source_tags and not continuing:  # `mlflow run` already tagged the run it made
            base = {**context_tags(run_kind), **base}
            if parent is not None:  # a sweep's child runs under the sweep's entry point
                base[schema.TAG_ENTRY_POINT] = parent.record.tags.get(
                    schema.TAG_ENTRY_POINT, base[schema.TAG_ENTRY_POINT]
                )
        self.record = RunRecord(run_kind, run_name=run_name, tags={**base, **(tags or {})})
        self._pending = RunRecord(run_kind, run_name=run_name, tags=dict(self.record.tags))
        self._client = None
        self._monitor = None
        self._written_params: set[str] = set()
        self._fail_reason: str | None = None

    # ---------------------------------------------------------------- recording
    def log_params(self, params: dict[str, Any]) -> None:
        self._add(
            RunRecord(self.record.run_kind, params={k: param_str(v) for k, v in params.items()})
        )

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._add(RunRecord(self.record.run_kind, tags={k: str(v) for k, v in tags.items()}))

    def log_metrics(self, metrics: dict[str, float]) -> None:
        self._add(
            RunRecord(self.record.run_kind, metrics={k: float(v) for k, v in metrics.items()})
        )

    def log_series(self, name: str, values: list[float]) -> None:
        self._add(RunRecord(self.record.run_kind, series={name: [float(v) for v in values]}))

    def log_text(self, artifact_path: str, text: str) -> None:
        self._add(RunRecord(self.record.run_kind, texts={artifact_path: text}))

    def log_file(self, artifact_path: str, local_path: str | os.PathLike) -> None:
        self._add(RunRecord(self.record.run_kind, files={artifact_path: str(local_path)}))

    def set_note(self, text: str) -> None:
        """The run's description (the MLflow UI's Description box and the note tag), plain text."""
        self.set_tags({schema.TAG_NOTE: text[:5000]})

    def log_input(self, dataset: dict) -> None:
        """A dataset input (a `dataset_input` dict): the UI's Dataset column and filter."""
        self._add(RunRecord(self.record.run_kind, inputs=[dataset]))

    def _add(self, part: RunRecord) -> None:
        part.validate()
        self.record.merge(part)
        self._pending.merge(part)

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "RunSession":
        if self.offline or (self.parent is not None and self.parent.offline):
            self._go_offline(None)  # the caller or the parent already found the server unreachable
            # a run created before the outage is completed by upload
            self.run_id = self.resume_run_id
            return self
        try:
            check_reachable()
            self._open()
        except BenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - decide below
            if not is_unreachable(exc):
                raise BenchError(f"cannot use the MLflow tracking store: {one_line(exc)}") from exc
            self._go_offline(exc)
        return self

    def fail(self, reason: str) -> None:
        """End this run FAILED with `reason` as its error, though the body raised nothing."""
        self._fail_reason = reason

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None and self._fail_reason:
            self.status, self.error = "FAILED", self._fail_reason
        elif exc is None:
            self.status = "FINISHED"
        elif isinstance(exc, KeyboardInterrupt):
            self.status, self.error = "KILLED", "interrupted by the user"
        else:
            self.status, self.error = "FAILED", one_line(exc)
        if self.error:
            self.set_tags({schema.TAG_ERROR: self.error[:5000]})
            if schema.TAG_NOTE not in self.record.tags:  # a run that ended before its summary
                self.set_note(f"{self.status}: {self.error}")
        self._finish()
        return False

    def flush(self) -> None:
        """Send what was recorded since the last flush (params and tags early, so the UI shows them)."""
        if self.offline or self._pending.is_empty():
            return
        try:
            self.send(self._pending)
            self._pending = RunRecord(self.record.run_kind)
        except Exception as exc:  # noqa: BLE001
            if not is_unreachable(exc):
                raise
            self._go_offline(exc)

    # ---------------------------------------------------------------- server side
    # What _open does, and what python -m common.upload does for a spooled run (common/upload.py).
    def continue_run(self, run_id: str, client) -> None:
        """Write into the run `run_id` the server already has, through `client` (an MlflowClient);
        params it already holds are not sent again."""
        self._client = client
        run = client.get_run(run_id)
        self.run_id, self.experiment_id = run_id, run.info.experiment_id
        self._written_params = set(run.data.params)

    def create_run(self, experiment_id: str, parent_run_id: str | None, client) -> None:
        """Create this session's run in `experiment_id` through `client`, named and tagged as
        recorded so far, nested under `parent_run_id` when one is given."""
        tags = dict(self.record.tags)
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        self._client = client
        run = client.create_run(experiment_id, run_name=self.record.run_name, tags=tags)
        self.run_id, self.experiment_id = run.info.run_id, experiment_id

    def send(self, rec: RunRecord) -> None:
        """Send `rec` to the run, removing each part from it as soon as the server has it: if a call
        fails, `rec` is exactly what is still unsent (so a spooled or re-uploaded run is never
        doubled)."""
        from mlflow.entities import Metric, Param, RunTag

        client, run_id = self._client, self.run_id
        now_ms = int(time.time() * 1000)
        params = [Param(k, v) for k, v in rec.params.items() if k not in self._written_params]
        tags = [RunTag(k, v) for k, v in rec.tags.items()]
        metrics = [Metric(k, v, now_ms, 0) for k, v in rec.metrics.items()]
        for name, values in rec.series.items():
            stride = series_stride(len(values))
            metrics.extend(
                Metric(name, v, now_ms, i) for i, v in enumerate(values) if i % stride == 0
            )
            if stride > 1:
                tags.append(RunTag(f"{name}_stride", str(stride)))
        if params or tags or metrics:
            client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self._written_params.update(p.key for p in params)
        rec.params.clear()
        rec.tags.clear()
        rec.metrics.clear()
        rec.series.clear()
        if rec.inputs:
            client.log_inputs(run_id, datasets=[_dataset_entity(d) for d in rec.inputs])
            rec.inputs.clear()
        for path, text in list(rec.texts.items()):
            client.log_text(run_id, text, path)
            del rec.texts[path]
        for path, local in list(rec.files.items()):
            art_dir, name = os.path.split(path)
            if os.path.basename(local) == name:
                client.log_artifact(run_id, local, art_dir or None)
            else:  # rename on the way in
                import tempfile

                with tempfile.TemporaryDirectory() as tmp:
                    shutil.copyfile(local, os.path.join(tmp, name))
                    client.log_artifact(run_id, os.path.join(tmp, name), art_dir or None)
            del rec.files[path]

    def terminate(self, status: str) -> None:
        """End the run on the server with `status` (FINISHED, FAILED, KILLED)."""
        self._client.set_terminated(self.run_id, status=status)

    # ---------------------------------------------------------------- internals
    def _open(self) -> None:
        self._client = mlflow_client()
        env_run = os.environ.get("MLFLOW_RUN_ID") if self.resume_env_run else None
        if env_run and not self.resume_run_id:
            # `mlflow run` created this run; take it over (and don't let child runs reuse it).
            del os.environ["MLFLOW_RUN_ID"]
        env_run = self.resume_run_id or env_run
        if env_run:
            self.continue_run(env_run, self._client)
            self._client.update_run(env_run, status="RUNNING", name=self.record.run_name)
        else:
            self.experiment_id = self._experiment_id()
            parent_run_id = self.parent.run_id if self.parent is not None else None
            self.create_run(self.experiment_id, parent_run_id, self._client)
        self.flush()

    def _experiment_id(self) -> str:
        if self.parent is not None and self.parent.experiment_id:
            return self.parent.experiment_id
        return experiment_id_for(self.experiment, create=True, client=self._client)

    def start_system_metrics(self, expected_s: float | None) -> None:
        """Sample system metrics (CPU, memory, disk, network; GPU utilisation and memory through
        NVML on NVIDIA) from now until the run ends, at an interval suited to a phase expected to
        last `expected_s` seconds (`system_metrics_interval`). Tag `system_metrics` says how
        often, or why not. Does nothing without `system_metrics`, offline or when already started."""
        if not self.system_metrics or self.offline or self._monitor is not None:
            return
        interval = system_metrics_interval(expected_s)
        if interval is None:
            self.set_tags(
                {
                    "system_metrics": f"off: the run measures for ~{expected_s:.2g} s, under two samples"
                }
            )
            return
        try:
            import psutil
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            psutil.cpu_percent()  # the monitor's first CPU sample covers the time since this call
            self._monitor = SystemMetricsMonitor(self.run_id, sampling_interval=interval)
            self._monitor.start()
            self.set_tags({"system_metrics": f"every {interval:.3g} s"})
        except Exception as exc:  # noqa: BLE001 - system metrics are a nice-to-have
            self._monitor = None
            console.note(f"system metrics off ({one_line(exc)})")

    def _finish(self) -> None:
        if self._monitor is not None:
            try:
                self._monitor.finish()
            except Exception:  # noqa: BLE001
                pass
        if not self.offline:
            try:
                self.flush()
                if not self.offline:
                    self.terminate(self.status)
            except Exception as exc:  # noqa: BLE001
                if not is_unreachable(exc):
                    raise
                self._go_offline(exc)
        if self.offline:
            self.spool_path = self._spool()
            console.info(
                f"tracking server unreachable: run kept in {self.spool_path}; "
                "send it later with `python -m common.upload`"
            )

    def _go_offline(self, exc: BaseException | None) -> None:
        if not self.offline and exc is not None:
            console.warn(f"tracking server unreachable ({one_line(exc)[:200]}); continuing offline")
        self.offline = True
        if self.parent is not None:
            self.parent.offline = True  # siblings started after this one go straight offline

    def _spool(self) -> Path:
        """Write the run to disk: the whole record and, for a run the server already has, the part
        still unsent (see common/spool.py)."""
        return spool.write_entry(
            self.local_id,
            record=asdict(self.record),
            unsent=asdict(self._pending) if self.run_id else None,
            run_id=self.run_id,
            experiment_id=self.experiment_id,
            experiment=self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME"),
            parent_local_id=self.parent.local_id if self.parent else None,
            parent_run_id=self.parent.run_id if self.parent else None,
            status=self.status,
            tracking_uri=tracking_uri(),
        )


def _dataset_entity(d: dict):
    """A `dataset_input` dict as the DatasetInput MlflowClient.log_inputs takes."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(
        name=d["name"],
        digest=d["digest"],
        source_type=d["source_type"],
        source=json.dumps(d["source"]),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", d["context"])])


def mlflow_client(client=None):
    """`client`, or a new MlflowClient for the tracking URI in use."""
    if client is not None:
        return client
    from mlflow.tracking import MlflowClient

    return MlflowClient()


def experiment_id_for(name: str | None, create: bool = False, client=None) -> str | None:
    """The experiment runs go to: `name`, else MLFLOW_EXPERIMENT_NAME / _ID, else Default ("0").

    None when the named experiment does not exist and `create` is false.
    """
    client = mlflow_client(client)
    name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        return client.create_experiment(name) if create else None
    return os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"


def mark_failed(run_id: str, reason: str, client=None) -> None:
    """End an existing run FAILED with `reason` as its `error` tag (the one way a run that no
    RunSession holds is failed: a pending `mlflow run` run, a stale child of a killed sweep)."""
    client = mlflow_client(client)
    client.set_tag(run_id, schema.TAG_ERROR, reason[:5000])
    client.set_terminated(run_id, status="FAILED")


def fail_pending_run(message: str) -> str | None:
    """End the run `mlflow run` created (MLFLOW_RUN_ID) FAILED with an `error` tag, if there is one.

    For errors found before a RunSession took that run over (bad flags under `mlflow run`): the run
    already exists and must not stay RUNNING without a reason. Returns its id, or None.
    """
    run_id = os.environ.pop("MLFLOW_RUN_ID", None)
    if not run_id:
        return None
    try:
        mark_failed(run_id, message)
    except Exception as exc:  # noqa: BLE001 - the message was printed; mlflow run marks it FAILED too
        console.note(f"could not mark run {run_id} FAILED ({one_line(exc)[:200]})")
    return run_id


def redirect_run(run_id: str, target_run_id: str, tags: dict[str, str], note: str) -> None:
    """Tag an existing run (one `mlflow run` created) as a pointer to `target_run_id`: `tags`, nested
    under the target (`mlflow.parentRunId`), with `note` as its description. Its status is left to
    whoever ends it (`mlflow run` does, from the exit code)."""
    from mlflow.entities import RunTag

    all_tags = {**tags, "mlflow.parentRunId": target_run_id, "mlflow.note.content": note}
    mlflow_client().log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in all_tags.items()])
