"""What a sweep did: one outcome per (configuration, repeat), their counts, the parent's
`sweep/summary.csv`, the console table and the closing lines. Pure: strings and numbers."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from common import fmt

STATUSES = ("FINISHED", "FAILED", "SKIPPED", "OFFLINE", "ELSEWHERE", "NOT_RUN")
"""FINISHED: measured now; FAILED: with its one-line reason; SKIPPED: finished by an earlier
invocation of the sweep, or by one running beside it (its run id and numbers are those of that
run); OFFLINE: measured now and kept in the spool (the server was unreachable); ELSEWHERE: being
measured by another invocation of the sweep running at the same time (another spool folder or
machine: its run id), claimed in the store first (train/sweep/claims.py); NOT_RUN: left out this
time by the caller (a what-if's --budget-s: the reason is its error), done by a later invocation."""


@dataclass
class ChildOutcome:
    label: str
    config_key: str
    sweep_key: str
    repeat: int
    status: str  # one of STATUSES
    run_id: str | None = None
    throughput_samples_per_s: float | None = None
    step_time_mean_s: float | None = None
    error: str | None = None

    @property
    def configuration(self) -> str:
        """The label without its repeat (`resnet18 b2 fp32 32px`)."""
        return self.label.rsplit(" #", 1)[0]


def status_counts(outcomes: list[ChildOutcome]) -> dict[str, int]:
    """Outcomes per status, every status present (0 when none)."""
    return {s: sum(o.status == s for o in outcomes) for s in STATUSES}


def parent_metrics(outcomes: list[ChildOutcome], planned: int) -> dict[str, float]:
    """The parent run's metrics: `children_<status>` and `children_planned`. `children_finished`
    counts the children every invocation of the sweep finished (those done before are also in
    `children_skipped`: what this invocation did not redo)."""
    counts = status_counts(outcomes)
    counts["FINISHED"] += counts["SKIPPED"]
    return {f"children_{k.lower()}": float(v) for k, v in counts.items()} | {
        "children_planned": float(planned)
    }


CSV_COLUMNS = (
    "configuration",
    "repeat",
    "status",
    "throughput_samples_per_s",
    "step_time_mean_s",
    "run_id",
    "config_key",
    "sweep_key",
    "error",
)


def summary_csv(outcomes: list[ChildOutcome]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for o in outcomes:
        w.writerow([fmt.csv_cell(getattr(o, c)) for c in CSV_COLUMNS])
    return buf.getvalue()


def summary_table(outcomes: list[ChildOutcome]) -> str:
    lines = ["| configuration | repeat | status | samples/s | ms/step |", "|---|---|---|---|---|"]
    for o in outcomes:
        sps = f"{o.throughput_samples_per_s:.2f}" if o.throughput_samples_per_s else ""
        ms = f"{o.step_time_mean_s * 1e3:.1f}" if o.step_time_mean_s else ""
        lines.append(f"| {o.configuration} | {o.repeat} | {o.status} | {sps} | {ms} |")
    return "\n".join(lines)


def closing_lines(name: str, outcomes: list[ChildOutcome], wall_s: float) -> list[str]:
    """The counts, every failure with its reason, and where offline runs are."""
    n = status_counts(outcomes)
    lines = [
        f"sweep {name}: {n['FINISHED']} finished, {n['SKIPPED']} skipped (done before), "
        f"{n['FAILED']} failed, {n['OFFLINE']} kept offline"
        + (f", {n['ELSEWHERE']} measured by another invocation" if n["ELSEWHERE"] else "")
        + (f", {n['NOT_RUN']} not run" if n["NOT_RUN"] else "")
        + f", in {wall_s:.0f} s"
    ]
    lines += [f"  failed: {o.label}: {o.error}" for o in outcomes if o.status == "FAILED"]
    if n["OFFLINE"]:
        lines.append(
            "  offline runs are in the spool: send them with `python -m common.upload` when the "
            "server is back"
        )
    return lines


def parent_note(
    name: str,
    env_label: str,
    matrix: dict,
    repeats: int,
    outcomes: list[ChildOutcome],
    wall_s: float,
) -> str:
    """The sweep parent's description (tag mlflow.note.content): what it covered (the matrix, the
    configurations x repeats, the environment), the counts and failures (`closing_lines`), and
    the fastest and slowest configuration measured now."""
    n_configs = len({o.configuration for o in outcomes})
    axes = "; ".join(f"{axis} = {', '.join(map(str, values))}" for axis, values in matrix.items())
    lines = [
        f"Sweep {name} on {env_label}: {n_configs} configuration(s) x {repeats} repeat(s) over "
        f"{axes or 'the base configuration'}.",
        *closing_lines(name, outcomes, wall_s),
    ]
    done = [o for o in outcomes if o.throughput_samples_per_s]
    if done:
        best = max(done, key=lambda o: o.throughput_samples_per_s)
        worst = min(done, key=lambda o: o.throughput_samples_per_s)
        lines.append(
            f"Fastest: {best.label}, {fmt.num(best.throughput_samples_per_s)} samples/s; "
            f"slowest: {worst.label}, {fmt.num(worst.throughput_samples_per_s)} samples/s."
        )
    return "\n".join(lines)


def all_failed(outcomes: list[ChildOutcome]) -> bool:
    """Every run failed (the parent ends FAILED, the command exits 1); offline is not a failure."""
    return bool(outcomes) and all(o.status == "FAILED" for o in outcomes)
