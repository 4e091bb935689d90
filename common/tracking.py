"""The one module that writes runs to MLflow.

Every entry point (train, profile, peaks, analysis, sweep, complexity) records its results into a
`RunRecord` (plain, JSON-serialisable data) inside a `RunSession`. The session

* creates the MLflow run, or resumes the one `mlflow run` created (MLFLOW_RUN_ID);
* writes params and tags as soon as they are known and everything else with batched calls;
* ends the run FINISHED, or FAILED with a one-line `error` tag when the body raised;
* when the tracking server cannot be reached, keeps the whole record in a local spool file so that
  no measurement is lost; `python -m common.upload` sends spooled runs once the server is back.

Only this module (and analysis/fetch.py, which reads) imports mlflow.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import schema
from common.errors import BenchError, one_line

SPOOL_ENV = "ROOFLINE_SPOOL_DIR"
# Metric histories keep at most this many points per series (every k-th step beyond it, with the
# stride in the tag `<name>_stride`). MLflow's SQL store inserts ~0.2 ms of CPU per metric row, so
# 10,000 rows cost ~2 s; callers keep the full series as an artifact (see train/__main__.py).
MAX_SERIES_POINTS = 1000

_UNREACHABLE_MARKERS = (
    "Connection refused",
    "Max retries exceeded",
    "Failed to establish a new connection",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Connection aborted",
    "Read timed out",
    "Connection reset",
    "RemoteDisconnected",
)


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

    def merge(self, other: "RunRecord") -> None:
        self.params.update(other.params)
        self.tags.update(other.tags)
        self.metrics.update(other.metrics)
        self.series.update(other.series)
        self.texts.update(other.texts)
        self.files.update(other.files)

    def is_empty(self) -> bool:
        return not (
            self.params or self.tags or self.metrics or self.series or self.texts or self.files
        )

    def validate(self) -> None:
        for key in [*self.params, *self.tags, *self.metrics, *self.series]:
            schema.check_key(key)


def series_stride(n_points: int) -> int:
    """Every how many steps a series of `n_points` is logged as metric history."""
    return max(1, -(-n_points // MAX_SERIES_POINTS))


def spool_dir() -> Path:
    """Where runs that could not reach the tracking server are kept."""
    return Path(os.environ.get(SPOOL_ENV) or Path.home() / ".cache" / "roofline-bench" / "spool")


def is_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the tracking server could not be reached (as opposed to a bad request)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        if type(exc).__name__ in (
            "ConnectionError",
            "ConnectTimeout",
            "ReadTimeout",
            "MaxRetryError",
        ):
            return True
        text = str(exc)
        if any(m in text for m in _UNREACHABLE_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class RunSession:
    """A context manager around one MLflow run. See the module docstring.

    `parent` makes this a child run (sweeps). `system_metrics` samples CPU/GPU/memory/disk into the
    run while it is open (MLflow's system metrics monitor).
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
        quiet: bool = False,
        offline: bool = False,
        local_id: str | None = None,
    ) -> None:
        if run_kind not in schema.RUN_KINDS:
            raise ValueError(f"run_kind must be one of {schema.RUN_KINDS}, got {run_kind!r}")
        self.experiment = experiment
        self.parent = parent
        self.system_metrics = system_metrics
        self.resume_env_run = resume_env_run and parent is None
        self.resume_run_id = run_id  # an existing run to continue (a resumed sweep's parent)
        self.quiet = quiet
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
        self.record = RunRecord(
            run_kind, run_name=run_name, tags={schema.TAG_RUN_KIND: run_kind, **(tags or {})}
        )
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

    def _add(self, part: RunRecord) -> None:
        part.validate()
        self.record.merge(part)
        self._pending.merge(part)

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "RunSession":
        if self.offline or (self.parent is not None and self.parent.offline):
            self._go_offline(None)  # the caller or the parent already found the server unreachable
            self.run_id = (
                self.resume_run_id
            )  # a run created before the outage is completed by upload
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
        self._finish()
        return False

    def flush(self) -> None:
        """Send what was recorded since the last flush (params and tags early, so the UI shows them)."""
        if self.offline or self._pending.is_empty():
            return
        try:
            self._write(self._pending)
            self._pending = RunRecord(self.record.run_kind)
        except Exception as exc:  # noqa: BLE001
            if not is_unreachable(exc):
                raise
            self._go_offline(exc)

    # ---------------------------------------------------------------- internals
    def _open(self) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient()
        env_run = os.environ.get("MLFLOW_RUN_ID") if self.resume_env_run else None
        if env_run and not self.resume_run_id:
            # `mlflow run` created this run; take it over (and don't let child runs reuse it).
            del os.environ["MLFLOW_RUN_ID"]
        env_run = self.resume_run_id or env_run
        if env_run:
            run = self._client.get_run(env_run)
            self.run_id, self.experiment_id = env_run, run.info.experiment_id
            self._written_params = set(run.data.params)
            self._client.update_run(env_run, status="RUNNING", name=self.record.run_name)
        else:
            self.experiment_id = self._experiment_id()
            tags = dict(self.record.tags)
            if self.parent is not None and self.parent.run_id:
                tags["mlflow.parentRunId"] = self.parent.run_id
            run = self._client.create_run(
                self.experiment_id, run_name=self.record.run_name, tags=tags
            )
            self.run_id = run.info.run_id
        if self.system_metrics:
            self._start_monitor()
        self.flush()

    def _experiment_id(self) -> str:
        if self.parent is not None and self.parent.experiment_id:
            return self.parent.experiment_id
        return experiment_id_for(self.experiment, create=True, client=self._client)

    def _start_monitor(self) -> None:
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._monitor = SystemMetricsMonitor(self.run_id)
            self._monitor.start()
        except Exception as exc:  # noqa: BLE001 - system metrics are a nice-to-have
            self._monitor = None
            self._say(f"note: system metrics off ({one_line(exc)})")

    def _write(self, rec: RunRecord) -> None:
        """Send `rec`, removing each part from it as soon as the server has it: if a call fails,
        `rec` is exactly what is still unsent (so a spooled or re-uploaded run is never doubled)."""
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
                    self._client.set_terminated(self.run_id, status=self.status)
            except Exception as exc:  # noqa: BLE001
                if not is_unreachable(exc):
                    raise
                self._go_offline(exc)
        if self.offline:
            self.spool_path = self._spool()
            self._say(
                f"tracking server unreachable: run kept in {self.spool_path}; "
                "send it later with `python -m common.upload`"
            )

    def _go_offline(self, exc: BaseException | None) -> None:
        if not self.offline and exc is not None:
            self._say(
                f"warning: tracking server unreachable ({one_line(exc)[:200]}); continuing offline"
            )
        self.offline = True
        if self.parent is not None:
            self.parent.offline = True  # siblings started after this one go straight offline

    def _spool(self) -> Path:
        """Write the run to disk: the whole record (what a resumed sweep reads: tags, params, status)
        and, for a run the server already has, the part still unsent (what upload sends)."""
        folder = spool_dir() / self.local_id
        (folder / "files").mkdir(parents=True, exist_ok=True)
        files = {}
        for i, (art, local) in enumerate(self.record.files.items()):
            dest = folder / "files" / f"{i}_{os.path.basename(local)}"
            if os.path.exists(local) and os.path.abspath(local) != os.path.abspath(dest):
                shutil.copyfile(local, dest)
            if dest.exists():
                files[art] = str(dest)
        unsent = None  # None: the run does not exist on the server yet; upload sends `record`
        if self.run_id:
            unsent = {
                **asdict(self._pending),
                "files": {a: files[a] for a in self._pending.files if a in files},
            }
        entry = {
            "local_id": self.local_id,
            "run_id": self.run_id,
            "experiment_id": self.experiment_id,
            "experiment": self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME"),
            "parent_local_id": self.parent.local_id if self.parent else None,
            "parent_run_id": self.parent.run_id if self.parent else None,
            "status": self.status,
            "tracking_uri": tracking_uri(),
            "created_s": time.time(),
            "record": {**asdict(self.record), "files": files},
            "unsent": unsent,
        }
        path = folder / "run.json"
        if (
            path.exists()
        ):  # continuing a spooled run (a resumed sweep's parent): keep its place in the order
            try:
                entry["created_s"] = json.loads(path.read_text()).get(
                    "created_s", entry["created_s"]
                )
            except (OSError, ValueError):
                pass
        _save_entry(entry, path)
        return path

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)


def experiment_id_for(name: str | None, create: bool = False, client=None) -> str | None:
    """The experiment runs go to: `name`, else MLFLOW_EXPERIMENT_NAME / _ID, else Default ("0").

    None when the named experiment does not exist and `create` is false.
    """
    if client is None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
    name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        return client.create_experiment(name) if create else None
    return os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"


def check_reachable(timeout_s: float = 5.0) -> None:
    """For an HTTP tracking server, one quick GET /health instead of MLflow's long retry schedule.

    Raises ConnectionError when the server does not answer; other URIs are not checked.
    """
    uri = tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as exc:
        raise ConnectionError(f"{uri} does not answer ({type(exc).__name__})") from exc


def server_reachable() -> bool:
    """False when an HTTP tracking server does not answer one quick GET /health (5 s timeout)."""
    try:
        check_reachable()
    except ConnectionError:
        return False
    return True


def tracking_uri() -> str:
    """The tracking URI in use (MLFLOW_TRACKING_URI, mlflow.set_tracking_uri, or the default)."""
    import mlflow

    return mlflow.get_tracking_uri()


def same_tracking_uri(uri: str | None) -> bool:
    """Whether `uri` (as a spool entry records it) is the tracking URI in use now."""
    return (uri or "").rstrip("/") == tracking_uri().rstrip("/")


# -------------------------------------------------------------------- spool upload
def spooled_runs(folder: Path | None = None) -> list[dict]:
    """Spooled runs, parents before their children, oldest first."""
    folder = folder or spool_dir()
    entries = []
    for path in sorted(folder.glob("*/run.json")):
        entry = json.loads(path.read_text())
        entry["_path"] = str(path)
        entries.append(entry)
    entries.sort(key=lambda e: (e["parent_local_id"] is not None, e["created_s"]))
    return entries


def _save_entry(entry: dict, path: str | Path | None = None) -> None:
    """Write a spool entry atomically (a crash leaves the old or the new entry, never half of one)."""
    path = Path(path or entry["_path"])
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({k: v for k, v in entry.items() if k != "_path"}, indent=1))
    tmp.replace(path)


def upload_spooled(folder: Path | None = None, say=print, select=None) -> tuple[int, int]:
    """Send spooled runs to the current tracking server. Returns (sent, still_spooled).

    `select(entry)` limits the upload to some entries (a resumed sweep sends its own). Safe to
    interrupt and repeat: a run id is written back into its entry (and into its children's entries,
    as their parent) as soon as the server created it, and what was sent is dropped from the entry,
    so a second upload completes the same run instead of creating another.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    sent = 0
    every = spooled_runs(folder)
    entries = [e for e in every if select is None or select(e)]
    run_ids: dict[str, str] = {}
    waiting = 0
    for entry in entries:
        rec = RunRecord(**entry["record"])
        # Entries written before "unsent" existed hold only the unsent part in "record".
        unsent = rec if entry.get("unsent") is None else RunRecord(**entry["unsent"])
        parent_local = entry.get("parent_local_id")
        parent_run = entry.get("parent_run_id") or run_ids.get(parent_local or "")
        if (
            parent_local
            and not parent_run
            and not entry.get("run_id")
            and any(e["local_id"] == parent_local for e in every if Path(e["_path"]).exists())
        ):
            waiting += 1  # its parent is still spooled: creating it now would orphan it
            continue
        session = RunSession(rec.run_kind, run_name=rec.run_name, quiet=True)
        session._client = client
        try:
            if entry.get("run_id"):
                session.run_id = entry["run_id"]
                session._written_params = set(client.get_run(entry["run_id"]).data.params)
            else:
                exp_name = entry.get("experiment")
                if entry.get("experiment_id"):
                    exp_id = entry["experiment_id"]
                elif exp_name:
                    exp = client.get_experiment_by_name(exp_name)
                    exp_id = exp.experiment_id if exp else client.create_experiment(exp_name)
                else:
                    exp_id = "0"
                tags = dict(rec.tags)
                if parent_run:
                    tags["mlflow.parentRunId"] = parent_run
                session.run_id = client.create_run(
                    exp_id, run_name=rec.run_name, tags=tags
                ).info.run_id
                entry.update(
                    run_id=session.run_id,
                    experiment_id=exp_id,
                    parent_run_id=parent_run,
                    unsent=asdict(unsent),
                )
                _save_entry(entry)
                _link_children(every, entry)
            session._write(unsent)
            client.set_terminated(session.run_id, status=entry.get("status") or "FINISHED")
        except Exception as exc:  # noqa: BLE001
            if entry.get("run_id"):
                entry["unsent"] = asdict(unsent)  # what _write has not sent yet
                _save_entry(entry)
            if is_unreachable(exc):
                say(f"server still unreachable: {one_line(exc)[:200]}")
                break
            raise
        run_ids[entry["local_id"]] = session.run_id
        _link_children(every, entry)
        shutil.rmtree(Path(entry["_path"]).parent, ignore_errors=True)
        sent += 1
        say(f"uploaded {rec.run_kind} run {rec.run_name or ''} -> {session.run_id}")
    if waiting:
        say(f"{waiting} run(s) wait for their parent run to be uploaded first")
    return sent, len(entries) - sent


def _link_children(entries: list[dict], parent: dict) -> None:
    """Record `parent`'s server run id in its spooled children, so a later upload links them."""
    for child in entries:
        if (
            child.get("parent_local_id") == parent["local_id"]
            and not child.get("parent_run_id")
            and Path(child["_path"]).exists()
        ):
            child["parent_run_id"] = parent["run_id"]
            _save_entry(child)


def mark_failed(run_id: str, reason: str, client=None) -> None:
    """End an existing run FAILED with `reason` as its `error` tag (the one way a run that no
    RunSession holds is failed: a pending `mlflow run` run, a stale child of a killed sweep)."""
    if client is None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
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
        print(f"note: could not mark run {run_id} FAILED ({one_line(exc)[:200]})", file=sys.stderr)
    return run_id


def redirect_run(run_id: str, target_run_id: str, tags: dict[str, str], note: str) -> None:
    """Tag an existing run (one `mlflow run` created) as a pointer to `target_run_id`: `tags`, nested
    under the target (`mlflow.parentRunId`), with `note` as its description. Its status is left to
    whoever ends it (`mlflow run` does, from the exit code)."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    all_tags = {**tags, "mlflow.parentRunId": target_run_id, "mlflow.note.content": note}
    MlflowClient().log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in all_tags.items()])


def ui_hint(run_id: str | None, experiment_id: str | None) -> str:
    """How to look at a run: the UI command for a local store, the URL for a server."""
    import mlflow

    uri = mlflow.get_tracking_uri()
    path = f"#/experiments/{experiment_id}/runs/{run_id}" if run_id else ""
    if uri.startswith(("http://", "https://")):
        return f"see {uri.rstrip('/')}/{path}"
    return f"see it with `mlflow ui --backend-store-uri {uri}`, then http://127.0.0.1:5000/{path}"
