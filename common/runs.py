"""Writes to runs no RunSession holds, and the housekeeping of runs whose process died.

`mark_failed`, `fail_pending_run` and `redirect_run` end or point runs that `mlflow run` created or a
killed process left; `process_tag` / `process_gone` / `close_stale_runs` find runs left RUNNING by a
process of this host that is gone (`kill -9`) and end them FAILED; `finished_runs`
is the read a run makes of others, `all_runs` what a resumed sweep reads. The session itself is common/tracking.py's.
"""

from __future__ import annotations

import os

from common import console, schema, spool
from common.errors import UsageError, one_line

MAX_EXPERIMENT_CHARS = 256
"""The longest experiment name: MLflow's SQL stores keep it in a column of 256 characters."""


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
        check_experiment_name(name)
        exp = client.get_experiment_by_name(name)
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise UsageError(
                f"experiment {name!r} is deleted on this tracking server: restore it (mlflow "
                f"experiments restore --experiment-id {exp.experiment_id}) or give another "
                "--experiment"
            )
        if exp is not None:
            return exp.experiment_id
        if not create:
            return None
        try:
            return client.create_experiment(name)
        except Exception as exc:
            # another process (a second upload, a sweep beside this one) created it in between
            if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = client.get_experiment_by_name(name)
            if exp is None:  # it exists but is deleted: MLflow's own message says so
                raise
            return exp.experiment_id
    return os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"


def check_experiment_name(name: str) -> str:
    """`name` if it can name an experiment, else UsageError: one printable line of at most
    MAX_EXPERIMENT_CHARS characters (main: a 5,000-character name ended as a store error, exit 1)."""
    shown = f"{name[:40]!r}{'...' if len(name) > 40 else ''}"
    if len(name) > MAX_EXPERIMENT_CHARS:
        raise UsageError(
            f"experiment name {shown} is {len(name):,} characters long: use at most "
            f"{MAX_EXPERIMENT_CHARS}"
        )
    if not name.isprintable():
        raise UsageError(f"experiment name {shown} holds a line break or control character")
    return name


def process_tag(pid: int | None = None) -> str:
    """The `process` tag of a run driven by process `pid` (default: this one) of this host:
    `<host>:<pid>:<start time, s since the epoch>` (a pid is reused; a pid and its start time are not)."""
    pid = os.getpid() if pid is None else pid
    return f"{schema.host_name()}:{pid}:{_process_start_s(pid) or 0:.2f}"


def _process_start_s(pid: int) -> float | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except psutil.Error:
        return None


def process_gone(tag: str) -> bool:
    """Whether the process a `process` tag names is known to be gone: it ran on this host and no
    process with that pid and start time is alive. False for another host's process, a malformed
    tag or a process this user may not inspect: a run is never ended on a guess."""
    try:
        host, pid, start = tag.rsplit(":", 2)
        pid, start = int(pid), float(start)
    except ValueError:
        return False
    if host != schema.host_name() or pid <= 0:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        alive = proc.status() != psutil.STATUS_ZOMBIE
        return not alive or abs(proc.create_time() - start) > 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # access denied: it exists, we cannot tell whose it is
        return False


STALE_REASON = "interrupted: the process recording this run ended before the run finished"


def close_stale_runs(
    client=None, experiment_ids: list[str] | None = None, also: list[str] = ()
) -> list[str]:
    """End FAILED every RUNNING run whose `process` tag names a process of this host that is gone
    (killed with `kill -9`, a crash, a power cut): such a run would otherwise stay RUNNING forever.
    `also`: ids of runs the caller knows are stale (a resumed sweep's children from before the tag).

    Runs of other hosts, of live processes, without the tag (made by older versions, or by `mlflow
    run` before the script took them over) and runs the local spool will complete (their id, or their
    `spool_local_id`, is in a spool entry) are left alone. Returns the ids it ended. Never raises: a
    store that cannot be searched just leaves them for next time.
    """
    try:
        client = mlflow_client(client)
        if experiment_ids is None:
            experiment_ids = all_experiment_ids(client)
        kept = _spooled_ids()
        host = schema.host_name()
        filt = f"attributes.status = 'RUNNING' and tags.{schema.TAG_PROCESS} LIKE {schema.filter_literal(host + ':%', 'host name')}"
        closed = []
        for run_id in also:
            mark_failed(run_id, STALE_REASON, client)
            closed.append(run_id)
        for i in range(0, len(experiment_ids), 100):
            for run in client.search_runs(experiment_ids[i : i + 100], filt, max_results=1000):
                tags = run.data.tags
                if run.info.run_id in kept or tags.get(schema.TAG_SPOOL_ID) in kept:
                    continue
                if process_gone(tags.get(schema.TAG_PROCESS, "")):
                    mark_failed(run.info.run_id, STALE_REASON, client)
                    closed.append(run.info.run_id)
    except Exception as exc:  # noqa: BLE001 - housekeeping never stops a measurement
        console.note(
            f"could not look for runs left RUNNING by dead processes ({one_line(exc)[:160]})"
        )
        return []
    if closed:
        console.info(
            f"marked {len(closed)} run(s) left RUNNING by a process that is gone as FAILED"
        )
    return closed


def all_experiment_ids(client=None) -> list[str]:
    """The ids of every active experiment of the store (paged)."""
    client = mlflow_client(client)
    ids, token = [], None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        ids += [e.experiment_id for e in page]
        token = page.token
        if not token:
            return ids


def _spooled_ids() -> set[str]:
    """Run ids and local ids of the entries of every spool folder this machine used (runs that
    upload will complete)."""
    out = set()
    entries = [
        e for folder in spool.known_folders() for e in spool.spooled_runs(folder, warn=False)
    ]
    for entry in entries:
        out.add(entry["local_id"])
        if entry.get("run_id"):
            out.add(entry["run_id"])
    return out


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


def finished_runs(experiment_id: str, filter_string: str, most: int = 100, client=None) -> list:
    """The FINISHED runs of `experiment_id` matching `filter_string`, newest first, at most
    `most` (a distributed train run's world-size-1 baselines, train/distributed/baseline.py)."""
    client = mlflow_client(client)
    return client.search_runs(
        [experiment_id],
        filter_string=f"attributes.status = 'FINISHED' and {filter_string}",
        max_results=most,
        order_by=["attributes.start_time DESC"],
    )


def all_runs(experiment_id: str, filter_string: str, order_by: list[str]) -> list:
    """Every run of `experiment_id` matching `filter_string`, in `order_by` order
    (mlflow.search_runs pages through them; what a resumed sweep has done, train/sweep/state.py)."""
    import mlflow

    return mlflow.search_runs(
        experiment_ids=[experiment_id],
        filter_string=filter_string,
        output_format="list",
        max_results=50_000,
        order_by=order_by,
    )


def artifact_text(run_id: str, path: str, client=None) -> str:
    """One small artifact of a run as text (without MLflow's progress bar on stderr): what a
    command reads of another's run (a breakdown's layers.csv, a what-if's predictions)."""
    import tempfile

    client = mlflow_client(client)
    bar = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    before = os.environ.get(bar)
    os.environ[bar] = "false"
    try:
        with tempfile.TemporaryDirectory(prefix="artifact-") as tmp:
            local = client.download_artifacts(run_id, path, tmp)
            with open(local, encoding="utf-8") as fh:
                return fh.read()
    finally:
        if before is None:
            os.environ.pop(bar, None)
        else:
            os.environ[bar] = before
