"""Writing runs to MLflow: the run session, and the few writes to runs no session holds.

Every entry point (train, profile, peaks, analysis, sweep, complexity) records its results into a
`RunRecord` (plain, JSON-serialisable data) inside a `RunSession`. The session

* creates the MLflow run, or resumes the one `mlflow run` created (MLFLOW_RUN_ID);
* writes params and tags as soon as they are known and everything else with batched calls;
* ends the run FINISHED, FAILED with a one-line `error` tag when the body raised, or KILLED when
  it was interrupted (Ctrl-C, or SIGTERM/SIGHUP: common/cli.py turns those into an interrupt);
* tags the run with the process that drives it (`process`: host, pid, start time), so that a later
  command can tell a run left RUNNING by a process that is gone (`kill -9`) and end it FAILED
  (`close_stale_runs`, which every top-level session runs when it opens);
* when the tracking server cannot be reached, or refuses a write after the run was created (a
  read-only database or artifact store), keeps the whole record in a local spool file
  (common/spool.py) so that no measurement is lost; if the spool cannot be written either, in a
  spool folder in the working directory (`RESCUE_DIR`), and says where. `python -m common.upload`
  (common/upload.py) sends spooled runs once the store works again, through the session's public
  `continue_run`, `create_run`, `send` and `terminate`.

What a run holds is common/run_record.py's; the writes to runs no session holds and the ending of runs
whose process died are common/runs.py's. Whether the server answers, and which one is in use, is
common/server.py's. Callers import each name from the module that defines it. Only these modules
(and analysis/fetch/, which reads) import mlflow. RunSession is one state machine (open, batch,
finish, fall back to the spool) whose methods share its state.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from common import console, schema, spool
from common.errors import BenchError, Terminated, one_line
from common.run_record import (
    RunRecord,
    context_tags,
    dataset_entity,
    param_str,
    series_stride,
    system_metrics_interval,
)
from common.runs import close_stale_runs, experiment_id_for, mlflow_client, process_tag
from common.server import check_reachable, display_uri, is_unreachable, redact, store_problem
from common.ui import mark_experiment, with_percents

# Where a run goes when neither the store nor the spool folder can be written: a spool folder in the
# working directory (python -m common.upload --spool-dir roofline-spool sends it).
RESCUE_DIR = "roofline-spool"

# MLflow's SQL store logs every database error with its traceback at ERROR level before raising it;
# the session reports the error itself, in one line.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


class FirstLineOnly(logging.Filter):
    """Keeps a log record to its first line (at most 300 characters): MLflow's system-metrics
    monitor warned with the whole SQL INSERT and its parameters when the disk was full."""

    def filter(self, record: logging.LogRecord) -> bool:
        lines = record.getMessage().strip().splitlines() or [""]
        record.msg, record.args = lines[0][:300], ()
        return True


logging.getLogger("mlflow.system_metrics.system_metrics_monitor").addFilter(FirstLineOnly())
# MLflow prints "View run <name> at: <tracking URI>/#/..." when a run on a server ends, user name and
# password included; the commands print their own hint, redacted (common.ui.ui_hint).
os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"


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
        self._stale_error = False
        self._continued = False  # writing into a run the server had before: metrics deduplicated
        self._store_error = False  # offline because the store refused a write (not an outage)

    # ---------------------------------------------------------------- recording
    def log_params(self, params: dict[str, Any]) -> None:
        self._add(
            RunRecord(self.record.run_kind, params={k: param_str(v) for k, v in params.items()})
        )

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._add(RunRecord(self.record.run_kind, tags={k: str(v) for k, v in tags.items()}))

    def log_metrics(self, metrics: dict[str, float]) -> None:
        self._add(
            RunRecord(
                self.record.run_kind,
                metrics=with_percents({k: float(v) for k, v in metrics.items()}),
            )
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
                if self.run_id is None:  # nothing measured yet: say what is wrong and stop
                    raise BenchError(f"cannot use {store_problem(exc)}") from exc
                # created, then refused a write: keep measuring, spool at the end
                self._store_failed(exc)
            else:
                self._go_offline(exc)
        return self

    def fail(self, reason: str) -> None:
        """End this run FAILED with `reason` as its error, though the body raised nothing."""
        self._fail_reason = reason

    def end(self, status: str, reason: str) -> None:
        """End the run now, KILLED or FAILED with `reason`, from outside its `with` block: a watcher
        thread whose process exits next while the main thread is blocked (a distributed run's
        SIGTERM watcher, train.distributed.failures.Guard). A KILLED run says it was interrupted,
        as an interrupt inside the block does."""
        if status == "KILLED":
            self.__exit__(KeyboardInterrupt, KeyboardInterrupt(reason), None)
        else:
            self.fail(reason)
            self.__exit__(None, None, None)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None and self._fail_reason:
            self.status, self.error = "FAILED", self._fail_reason
        elif exc is None:
            self.status = "FINISHED"
        elif isinstance(exc, Terminated):
            self.status, self.error = "KILLED", str(exc)
        elif isinstance(exc, KeyboardInterrupt):
            self.status, self.error = "KILLED", "interrupted by the user"
        else:
            self.status, self.error = "FAILED", one_line(exc)
        if self.error:
            self.error = redact(self.error)
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
        except Exception as exc:  # noqa: BLE001 - nothing recorded is lost: spooled at the end
            if is_unreachable(exc):
                self._go_offline(exc)
            else:
                self._store_failed(exc)

    # ---------------------------------------------------------------- server side
    # What _open does, and what python -m common.upload does for a spooled run (common/upload.py).
    def continue_run(self, run_id: str, client) -> None:
        """Write into the run `run_id` the server already has, through `client` (an MlflowClient);
        params it already holds are not sent again."""
        self._client = client
        run = client.get_run(run_id)
        self.run_id, self.experiment_id = run_id, run.info.experiment_id
        self._written_params = set(run.data.params)
        self._continued = True
        # a resumed run (a sweep's parent) may carry the error of the attempt it resumes
        self._stale_error = schema.TAG_ERROR in run.data.tags
        client.set_tag(run_id, schema.TAG_PROCESS, process_tag())  # this process drives it now
        mark_experiment(client, self.experiment_id)

    def create_run(self, experiment_id: str, parent_run_id: str | None, client) -> None:
        """Create this session's run in `experiment_id` through `client`, named and tagged as
        recorded so far, nested under `parent_run_id` when one is given."""
        tags = {**self.record.tags, schema.TAG_PROCESS: process_tag()}
        tags.setdefault(schema.TAG_HOST, schema.host_name())
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        self._client = client
        run = client.create_run(experiment_id, run_name=self.record.run_name, tags=tags)
        self.run_id, self.experiment_id = run.info.run_id, experiment_id
        mark_experiment(client, experiment_id)

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
        if metrics and self._continued:
            metrics = _not_logged_yet(client, run_id, metrics)
        if params or tags or metrics:
            client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self._written_params.update(p.key for p in params)
        rec.params.clear()
        rec.tags.clear()
        rec.metrics.clear()
        rec.series.clear()
        if rec.inputs:
            _log_inputs(client, run_id, [dataset_entity(d) for d in rec.inputs])
            rec.inputs.clear()
        for path, text in list(rec.texts.items()):
            client.log_text(run_id, text, path)
            del rec.texts[path]
        for path, local in list(rec.files.items()):
            art_dir, name = os.path.split(path)
            if os.path.basename(local) == name:
                client.log_artifact(run_id, local, art_dir or None)
            else:  # rename on the way in
                with tempfile.TemporaryDirectory() as tmp:
                    shutil.copyfile(local, os.path.join(tmp, name))
                    client.log_artifact(run_id, os.path.join(tmp, name), art_dir or None)
            del rec.files[path]

    def terminate(self, status: str) -> None:
        """End the run on the server with `status` (FINISHED, FAILED, KILLED). A continued run that
        ends FINISHED loses the `error` tag an earlier attempt left on it."""
        if status == "FINISHED" and self._stale_error:
            self._client.delete_tag(self.run_id, schema.TAG_ERROR)
            self._stale_error = False
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
        if self.parent is None:  # once the store proved it works: runs of dead processes
            close_stale_runs(self._client)
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
            except Exception as exc:  # noqa: BLE001 - nothing recorded is lost: spooled below
                if is_unreachable(exc):
                    self._go_offline(exc)
                else:
                    self._store_failed(exc)
        if self.offline:
            self.spool_path = self._keep()
            if not self._store_error and self.spool_path.parent.parent == spool.spool_dir():
                console.info(
                    f"tracking server unreachable: run kept in {self.spool_path}; "
                    "send it later with `python -m common.upload`"
                )

    def _store_failed(self, exc: BaseException) -> None:
        """The store refused a write after the run was created (not an outage): say so once, and
        keep the rest of the run in the spool like an offline run (upload completes it)."""
        if not self.offline:
            console.warn(
                f"could not record the run in {store_problem(exc)}; the run is kept in the spool "
                "instead: fix the store, then send it with `python -m common.upload`"
            )
            self._store_error = True
        self._go_offline(None)

    def _go_offline(self, exc: BaseException | None) -> None:
        if not self.offline and exc is not None:
            console.warn(f"tracking server unreachable ({one_line(exc)[:200]}); continuing offline")
        self.offline = True
        if self.parent is not None:
            self.parent.offline = True  # siblings started after this one go straight offline

    def _keep(self) -> Path:
        """Spool the run; when the spool folder cannot be written, write the same entry to a spool
        folder in the working directory, and say where. Returns the entry's run.json."""
        try:
            return self._spool()
        except OSError as exc:
            failed = f"{spool.spool_dir()} ({one_line(exc)[:160]})"
        try:
            path = self._spool(Path(RESCUE_DIR).resolve())
        except OSError as exc:  # nowhere to write: the summary printed by the caller is all
            console.warn(
                f"could not keep the run: neither the spool folder {failed} nor "
                f"{Path(RESCUE_DIR).resolve()} ({one_line(exc)[:160]}) can be written"
            )
            console.warn(f"the run's record: {json.dumps(asdict(self.record))}")
            raise BenchError(
                "the run could not be written anywhere: its whole record is printed above"
            ) from exc
        console.warn(
            f"could not write the spool folder {failed}: run kept in {path}; send it with "
            f"`python -m common.upload --spool-dir {path.parent.parent}`"
        )
        return path

    def _spool(self, folder: Path | None = None) -> Path:
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
            tracking_uri=display_uri(),
            folder=folder,
        )


def _not_logged_yet(client, run_id: str, metrics: list) -> list:
    """`metrics` without the points (key, step, value) the run's history already holds: a run
    continued from a spool entry (or from a copy of one already sent) must not log its metrics
    twice. One history request per key."""
    have = set()
    for key in {m.key for m in metrics}:
        have.update((m.key, m.step, m.value) for m in client.get_metric_history(run_id, key))
    return [m for m in metrics if (m.key, m.step, m.value) not in have]


def _log_inputs(client, run_id: str, datasets: list, tries: int = 4) -> None:
    """`client.log_inputs`, tried again when another writer created the same dataset at the same
    moment: the store looks a dataset up, then inserts it, so two runs of one experiment logging the
    same new dataset at once collide on its unique key (`UNIQUE constraint failed:
    datasets.experiment_id, datasets.name, datasets.digest` on sqlite, `duplicate key value` on
    PostgreSQL); tried again, the lookup finds the other writer's row."""
    for attempt in range(tries):
        try:
            client.log_inputs(run_id, datasets=datasets)
            return
        except Exception as exc:  # noqa: BLE001 - only the duplicate-dataset race is retried
            text = str(exc)
            race = "UNIQUE constraint failed: datasets" in text or (
                "duplicate key value" in text and "datasets" in text
            )
            if not race or attempt == tries - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
