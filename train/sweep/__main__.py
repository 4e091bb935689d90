"""The command line of `python -m train.sweep` (see the package docstring and docs/sweep.md)."""

from __future__ import annotations

import time

from common import console
from common.cli import ArgumentParser, cli_entry, optional, split_words
from common.errors import UsageError
from train import sweep as package
from train.config import add_config_args
from train.sweep.spec import AXIS_ALIASES, CONFIG_FIELDS, SweepSpec, load_spec_file, plan_sweep

AXIS_FLAGS = (
    "models",
    "batch_sizes",
    "precisions",
    "image_sizes",
    "world_sizes",
)  # AXIS_ALIASES names the axis


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train.sweep", description=package.__doc__.split("\n\n")[0]
    )
    # Config flags given on the command line override the sweep file's base; unset ones stay None.
    add_config_args(parser, overrides=True)
    m = parser.add_argument_group("matrix")
    m.add_argument(
        "--matrix",
        metavar="FILE",
        type=optional(str),
        help="YAML/JSON sweep file: {name, repeats, matrix: {axis: [...]}, base: {...}}",
    )
    m.add_argument(
        "--models", nargs="+", type=_list_of(str), help="model axis, e.g. resnet18 resnet50"
    )
    m.add_argument("--batch-sizes", nargs="+", type=_list_of(int), help="batch axis, e.g. 16 32 64")
    m.add_argument(
        "--precisions", nargs="+", type=_list_of(str), help="precision axis, e.g. fp32 bf16"
    )
    m.add_argument("--image-sizes", nargs="+", type=_list_of(int), help="image size axis")
    m.add_argument(
        "--world-sizes",
        nargs="+",
        type=_list_of(int),
        help="processes per job, with --distributed ddp|deepspeed: one torchrun job per child, e.g. 1 2 4",
    )
    m.add_argument(
        "--repeats",
        type=optional(int),
        default=None,
        help="runs per configuration (default 1)",
    )
    m.add_argument(
        "--name",
        type=optional(str),
        default=None,
        help="sweep name (default: a hash of the matrix); the same name resumes",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--experiment",
        default=None,
        type=optional(str),
        help="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    out.add_argument("--no-progress", action="store_true")
    out.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and what would be skipped; run nothing",
    )
    return parser


def _list_of(convert):
    """One flag value holding a list ("resnet18 resnet50" or "16,32", as MLproject passes it)."""

    def parse(text):
        return [convert(v) for v in split_words(text)]

    parse.__name__ = convert.__name__
    return parse


def spec_from_args(args) -> SweepSpec:
    data = load_spec_file(args.matrix) if args.matrix else {"matrix": {}}
    matrix = dict(data.get("matrix") or {})
    for flag in AXIS_FLAGS:
        values = [v for chunk in getattr(args, flag) or [] for v in chunk]
        if values:
            matrix[AXIS_ALIASES[flag]] = values
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
    repeats = args.repeats if args.repeats is not None else data.get("repeats", 1)
    try:
        return SweepSpec(
            matrix=matrix, base=base, repeats=repeats, name=args.name or data.get("name")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def dry_run(spec: SweepSpec, experiment: str | None) -> None:
    """Print the plan, each run marked `run` or `skip` (done before), and nothing runs."""
    from train.sweep.state import check_same_spec, existing_state

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
    from train.sweep.runner import run_sweep
    from train.sweep.summary import all_failed, closing_lines, summary_table

    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    if args.dry_run:
        dry_run(spec, args.experiment)
        return 0
    t0 = time.perf_counter()
    outcomes = run_sweep(spec, experiment=args.experiment, progress=not args.no_progress)
    console.result(summary_table(outcomes))
    for line in closing_lines(spec.name, outcomes, time.perf_counter() - t0):
        console.result(line)
    # Offline is not a failure (the measurement is kept); exit 1 only when every run failed.
    return 1 if all_failed(outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
