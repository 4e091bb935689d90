"""The command line of `python -m train.sweep` (see the package docstring and docs/sweep.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common import console, flags
from common.cli import ArgumentParser, cli_entry
from common.errors import UsageError
from train import sweep as package
from train.config import add_config_args
from train.sweep.spec import AXIS_ALIASES, CONFIG_FIELDS, SweepSpec, load_spec_file, plan_sweep
from train.sweep.state import check_same_spec, existing_state
from train.sweep.outcomes import all_failed, closing_lines, summary_table


@dataclass
class SweepCommand:
    """The matrix a sweep runs and how (a configuration flag given on the command line overrides
    the sweep file's base)."""

    matrix: str | None = field(default=None, metadata={"metavar": "FILE"})
    """YAML/JSON sweep file: {name, repeats, matrix: {axis: [...]}, base: {...}}."""
    models: list[str] = field(default_factory=list)
    """model axis, e.g. resnet18 resnet50."""
    batch_sizes: list[int] = field(default_factory=list)
    """batch axis, e.g. 16 32 64."""
    precisions: list[str] = field(default_factory=list)
    """precision axis, e.g. fp32 bf16."""
    image_sizes: list[int] = field(default_factory=list)
    """image size axis."""
    world_sizes: list[int] = field(default_factory=list)
    """processes per job, with --distributed ddp|deepspeed: one torchrun job per child, e.g. 1 2 4."""
    repeats: int | None = None
    """runs per configuration (default 1)."""
    name: str | None = None
    """sweep name (default: a hash of the matrix); the same name resumes."""
    experiment: str | None = flags.experiment()
    no_progress: bool = flags.no_progress()
    dry_run: bool = field(default=False, metadata=flags.SWITCH)
    """print the plan and what would be skipped; run nothing."""


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train.sweep", description=package.__doc__.split("\n\n")[0]
    )
    add_config_args(parser, overrides=True)  # unset ones stay None: the sweep file decides
    flags.add_flags(parser.add_argument_group("matrix and output"), SweepCommand)
    return parser


def spec_from_args(args, command: SweepCommand | None = None) -> SweepSpec:
    command = command or flags.build(SweepCommand, args)
    data = load_spec_file(command.matrix) if command.matrix else {"matrix": {}}
    matrix = dict(data.get("matrix") or {})
    for axis, name in AXIS_ALIASES.items():  # the SweepCommand fields that are axes
        if getattr(command, axis, None):
            matrix[name] = getattr(command, axis)
    base = dict(data.get("base") or {})
    for name in CONFIG_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            if name in matrix:
                raise UsageError(
                    f"--{name.replace('_', '-')} is a single value but {name} is a matrix axis: use one or the other"
                )
            base[name] = value
    if not matrix:
        raise UsageError(
            "nothing to sweep: give --models/--batch-sizes/--precisions/--image-sizes/--world-sizes "
            "or --matrix FILE"
        )
    repeats = command.repeats if command.repeats is not None else data.get("repeats", 1)
    try:
        return SweepSpec(
            matrix=matrix, base=base, repeats=repeats, name=command.name or data.get("name")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def dry_run(spec: SweepSpec, experiment: str | None) -> None:
    """Print the plan, each run marked `run` or `skip` (done before), and nothing runs."""
    plan = plan_sweep(spec)
    state = existing_state(spec.name, plan.env_label, experiment)
    check_same_spec(spec, state, plan.env_label)
    for cfg, r, key in plan.runs:
        done = (key, r) in state.done
        console.result(f"{'skip' if done else 'run '}  {plan.label(cfg, r)}  sweep_key={key}")
    n_done = sum((key, r) in state.done for _, r, key in plan.runs)
    where = "" if state.reachable else " (server unreachable: spooled runs only)"
    console.result(
        f"sweep {spec.name} on {plan.env_label}: {len(plan.runs)} run(s) planned, "
        f"{n_done} already done{where}"
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = flags.build(SweepCommand, args)
    spec = spec_from_args(args, command)
    if command.dry_run:
        dry_run(spec, command.experiment)
        return 0
    from train.sweep.runner import run_sweep  # after --help: it imports train.run, numpy (+0.25 s)

    t0 = time.perf_counter()
    outcomes = run_sweep(spec, experiment=command.experiment, progress=not command.no_progress)
    console.result(summary_table(outcomes))
    for line in closing_lines(spec.name, outcomes, time.perf_counter() - t0):
        console.result(line)
    # Offline is not a failure (the measurement is kept); exit 1 only when every run failed.
    return 1 if all_failed(outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
