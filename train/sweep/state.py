"""What a sweep already did: reconciliation of the tracking server, the offline spool and this
machine's ledger, for one sweep name on one env label (docs/sweep.md, "Resume" and "Server
unreachable"). Reads the server (common.runs.all_runs: a sweep must know what is done), the spool
and the ledger; writes the ledger.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from common import console, schema
from common.errors import BenchError, UsageError, one_line
from common.locks import holder, locked
from common.runs import all_runs, close_stale_runs, experiment_id_for
from common.server import (
    is_unreachable,
    same_tracking_uri,
    server_reachable,
    store_problem,
    tracking_uri,
)
from common.spool import spool_dir, spooled_runs
from common.upload import upload_spooled
from train.sweep.spec import (
    PARAM_REPEAT,
    TAG_RESUME_OF,
    TAG_SWEEP_KEY,
    TAG_SWEEP_NAME,
    SweepSpec,
    unique,
)


@dataclass
class SweepState:
    """What the tracking server (and the offline spool) already hold for a sweep on one env label."""

    parent_run_id: str | None = None
    parent_local_id: str | None = None
    """the parent's spool entry, if it was kept offline"""
    parent_params: dict = field(default_factory=dict)
    done: set[tuple[str, int]] = field(default_factory=set)
    """(sweep_key, repeat) FINISHED"""
    spooled: set[tuple[str, int]] = field(default_factory=set)
    """of those, kept in the spool (not yet uploaded)"""
    remembered: set[tuple[str, int]] = field(default_factory=set)
    """of those, known from the local ledger only"""
    earlier: dict[tuple[str, int], dict] = field(default_factory=dict)
    """(sweep_key, repeat) done -> its run: run_id (None while spooled), throughput_samples_per_s,
    step_time_mean_s (the ledger knows keys only)"""
    stale_running: list[str] = field(default_factory=list)
    """children left RUNNING by a process of this host from before runs carried a `process` tag
    (common.tracking.close_stale_runs ends the others)"""
    reachable: bool = True


def _is_mine(entry: dict, name: str, env_label: str) -> bool:
    """A spool entry of this sweep on this env label, meant for the tracking server in use."""
    tags = entry["record"]["tags"]
    return (
        tags.get(TAG_SWEEP_NAME) == name
        and tags.get(schema.TAG_ENV_LABEL) == env_label
        and same_tracking_uri(entry.get("tracking_uri"))
    )


def existing_state(
    name: str, env_label: str, experiment: str | None, reachable: bool | None = None
) -> SweepState:
    """Done runs, the parent and stale children of the sweep, from the spool and (if it answers its
    quick /health check) the server. `reachable=False` skips the server without asking it."""
    schema.filter_literal(env_label, "env label")  # a label no filter can hold: one line, now
    state = SweepState(reachable=server_reachable() if reachable is None else reachable)
    spooled_ids = _read_spool(name, env_label, state)
    state.done |= state.spooled
    if state.reachable:
        _read_server(name, env_label, experiment, state, spooled_ids)
    else:
        # What reached the server before it went away: this machine's own ledger of it.
        state.remembered = _read_ledger(name, env_label) - state.done
        state.done |= state.remembered
    return state


def _read_spool(name: str, env_label: str, state: SweepState) -> set[str]:
    """The sweep's parent and FINISHED children kept offline, into `state`. Returns the server run
    ids of spooled entries (runs the server has, which upload will complete)."""
    spooled_ids = set()
    for entry in spooled_runs():
        if not _is_mine(entry, name, env_label):
            continue
        rec = entry["record"]
        if entry.get("run_id"):
            spooled_ids.add(entry["run_id"])
        if rec["run_kind"] == "sweep" and state.parent_local_id is None:
            state.parent_local_id, state.parent_params = entry["local_id"], dict(rec["params"])
            state.parent_run_id = entry.get("run_id")
        elif (
            rec["run_kind"] == "train"
            and entry["status"] == "FINISHED"
            and rec["tags"].get(TAG_SWEEP_KEY)
        ):
            done = (rec["tags"][TAG_SWEEP_KEY], int(rec["params"].get(PARAM_REPEAT, -1)))
            state.spooled.add(done)
            state.earlier.setdefault(done, _earlier(entry.get("run_id"), rec["metrics"]))
    return spooled_ids


def _earlier(run_id: str | None, metrics: dict) -> dict:
    """What the summary of a resumed sweep shows of a child an earlier invocation finished."""
    return {
        "run_id": run_id,
        "throughput_samples_per_s": metrics.get("throughput_samples_per_s"),
        "step_time_mean_s": metrics.get("step_time_mean_s"),
    }


def _read_server(
    name: str, env_label: str, experiment: str | None, state: SweepState, spooled_ids: set[str]
) -> None:
    """The sweep's parent, FINISHED children and children left RUNNING on the server, into `state`
    (and this machine's ledger); `state.reachable` becomes False if the server went away."""
    try:
        exp_id = experiment_id_for(experiment)
        if exp_id is None:
            return
        filt = (
            f"tags.{TAG_SWEEP_NAME} = {schema.filter_literal(name, 'sweep name')} and "
            f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(env_label, 'env label')}"
        )
        runs = all_runs(exp_id, filt, ["attributes.start_time ASC"])
    except Exception as exc:  # noqa: BLE001
        if not is_unreachable(exc):
            # not a store (an HTTP service that is not MLflow, a damaged sqlite file): one line
            raise BenchError(f"cannot use {store_problem(exc)}") from None
        state.reachable = False
        return
    for run in runs:
        tags, run_id, status = run.data.tags, run.info.run_id, run.info.status
        kind = tags.get(schema.TAG_RUN_KIND)
        if kind == "sweep" and TAG_RESUME_OF not in tags:
            # the first parent; a spooled one is the same run
            if state.parent_run_id in (None, run_id):
                state.parent_run_id = run_id
                state.parent_params = state.parent_params or dict(run.data.params)
        elif kind == "train" and status == "FINISHED" and tags.get(TAG_SWEEP_KEY):
            done = (tags[TAG_SWEEP_KEY], int(run.data.params.get(PARAM_REPEAT, -1)))
            state.done.add(done)
            state.earlier.setdefault(done, _earlier(run_id, run.data.metrics))
        elif (
            kind == "train"
            and status == "RUNNING"
            and run_id not in spooled_ids  # a spooled one is completed by upload instead
            and schema.TAG_PROCESS not in tags  # close_stale_runs knows whether it is alive
            and tags.get(schema.TAG_HOST, schema.host_name()) == schema.host_name()
        ):
            # made by a version without the `process` tag; the sweep lock says no process of this
            # host runs this sweep now
            state.stale_running.append(run_id)
    save_ledger(name, env_label, state)


def _ledger_path(name: str, env_label: str) -> Path:
    """This machine's record of the sweep's runs FINISHED on the server (consulted only while the
    server is unreachable, so that an offline resume does not redo them). Next to the spool."""
    ident = json.dumps([tracking_uri().rstrip("/"), name, env_label])
    return spool_dir() / "sweeps" / f"{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


def _read_ledger(name: str, env_label: str) -> set[tuple[str, int]]:
    try:
        data = json.loads(_ledger_path(name, env_label).read_text())
        return {(str(k), int(r)) for k, r in data["done"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def save_ledger(name: str, env_label: str, state: SweepState) -> None:
    """Remember what the server holds as done (`done` but not `spooled`) in this machine's ledger."""
    done = state.done - state.spooled
    path = _ledger_path(name, env_label)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"sweep_name": name, "env_label": env_label, "done": sorted(done)})
        )
        tmp.replace(path)
    except OSError:
        pass  # a convenience for offline resumes; never a reason to fail the sweep


def check_same_spec(spec: SweepSpec, state: SweepState, env_label: str) -> None:
    """A name stands for one matrix: resuming it with another matrix, base or repeats is refused
    (the parent's params are immutable and would describe a different sweep)."""
    if not state.parent_params:
        return
    old, new = state.parent_params, spec.run_params()

    def parsed(key, text):
        value = json.loads(text) if key != "sweep_repeats" else int(float(text))
        if key == "sweep_base" and isinstance(value, dict):
            value.pop("env_label", None)  # older sweeps kept the label in the base
        if key == "sweep_matrix" and isinstance(value, dict):
            value = {
                k: unique(v) if isinstance(v, list) else v for k, v in value.items()
            }  # and repeated values
        return value

    names = {
        "sweep_matrix": "matrix",
        "sweep_base": "base configuration",
        "sweep_repeats": "repeats",
        "sweep_variants": "list of configurations",
    }
    changed = []
    for key, what in names.items():
        if key == "sweep_variants" and (key in old) != (key in new):
            changed.append(what)  # one of the two lists its configurations one by one
        elif key in old:
            try:
                same = parsed(key, old[key]) == parsed(key, str(new[key]))
            except (ValueError, TypeError):
                same = old[key] == str(new[key])
            if not same:
                changed.append(f"{what} (was {old[key][:120]})")
    if changed:
        raise UsageError(
            f"sweep {spec.name!r} on {env_label} already exists with a different {'; '.join(changed)}: "
            "give this matrix a new --name, or run the original command to resume it"
        )


@contextlib.contextmanager
def sweep_lock(name: str, env_label: str) -> Iterator[None]:
    """Hold this machine's lock on the sweep `name` on `env_label` (a file next to its ledger): a
    second invocation of the same sweep while one runs would run every configuration twice, so it
    is refused in one line. A spool folder that cannot be written leaves the sweep unlocked, with a
    warning."""
    path = _ledger_path(name, env_label).with_suffix(".lock")
    with contextlib.ExitStack() as stack:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            held = stack.enter_context(locked(path))
        except OSError as exc:
            console.warn(
                f"cannot lock sweep {name!r} ({one_line(exc)[:160]}): a second run of it at the "
                "same time would not be stopped"
            )
            held = None
        if held is False:
            raise BenchError(
                f"sweep {name!r} on {env_label} is already running on this machine (process "
                f"{holder(path)}): wait for it to end (running it again then resumes it), or give "
                "this one another --name"
            )
        yield


def upload_own_spool(name: str, env_label: str) -> bool:
    """Send this sweep's spooled runs (kept offline by an earlier attempt) before resuming, so that the
    server alone says what is done. Returns whether the server is still reachable."""
    try:
        with console.quiet():
            sent, left = upload_spooled(select=lambda e: _is_mine(e, name, env_label))
    except Exception as exc:  # noqa: BLE001 - a run the server refuses stays spooled (and counts as done)
        if is_unreachable(exc):
            return False
        console.warn(
            f"could not upload this sweep's spooled runs ({one_line(exc)[:200]}); "
            "they stay in the spool: see python -m common.upload --list"
        )
        return True
    if sent:
        console.info(f"uploaded {sent} run(s) of sweep {name} kept offline by an earlier attempt")
    return not left or server_reachable()


def reconcile(spec: SweepSpec, env_label: str, experiment: str | None) -> SweepState:
    """What is done of `spec` on `env_label`, after the housekeeping a resume needs.

    One quick GET /health first (a dead server costs seconds, not minutes); if the server answers,
    this sweep's runs an earlier attempt kept offline are uploaded, so that the server alone says
    what is done; runs a killed process left RUNNING are closed FAILED
    (common.tracking.close_stale_runs, as every command does). Resuming a name with another matrix
    is refused (UsageError).
    """
    reachable = server_reachable()
    if reachable:
        reachable = upload_own_spool(spec.name, env_label)
    state = existing_state(spec.name, env_label, experiment, reachable=reachable)
    check_same_spec(spec, state, env_label)
    if not state.reachable:
        console.warn(
            "tracking server unreachable: runs already done are known from this machine's spool "
            "and ledger only; this sweep's runs are kept offline (python -m common.upload sends them later)"
        )
    else:
        close_stale_runs(also=state.stale_running)
    return state
