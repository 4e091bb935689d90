"""The command line of `python -m train.whatif` (see the package docstring and docs/whatif.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from common import console, flags, ui
from common.cli import ArgumentParser, cli_entry
from train import whatif as package
from train.whatif.loop import Request, run_whatif
from train.whatif.runlog import table_text


@dataclass
class WhatifCommand:
    """Which moves a what-if runs, how often, and within what time."""

    repeats: int = 3
    """runs of the original and of each move, alternated (one pass over all of them per repeat)."""
    moves: list[str] = field(default_factory=list)
    """only these moves, e.g. bf16 compile batch_x2 (default: every move of the configuration
    here: bf16/fp16/tf32 as the device runs them, channels_last, compile, batch_x2, batch_half,
    workers_x2 with a data loader)."""
    budget_s: float = 0.0
    """seconds the what-if may take (0: no limit); moves whose runs will not fit are left out,
    each with a line (run the same command again to run them)."""
    experiment: str | None = flags.experiment()
    no_progress: bool = flags.no_progress()

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ValueError(
                f"repeats must be 2 or more (a measured interval needs two runs), got {self.repeats}"
            )
        if not self.budget_s >= 0:
            raise ValueError(f"budget_s must be >= 0 (0: no limit), got {self.budget_s}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train.whatif", description=package.__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "run_id", metavar="RUN_ID", help="the train or breakdown run whose configuration to move"
    )
    flags.add_flags(parser.add_argument_group("what-if"), WhatifCommand)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = flags.build(WhatifCommand, args, as_flags=True)
    req = Request(
        run_id=args.run_id.strip(),
        repeats=command.repeats,
        moves=command.moves,
        budget_s=command.budget_s,
        experiment=command.experiment,
        progress=not command.no_progress,
    )
    out = run_whatif(req)
    console.result(table_text(out.rows))
    for line in out.left_out:
        console.result(f"not run: {line}")
    for line in out.no_move:
        console.result(f"no move: {line}")
    console.result(f"what-if run {out.run_id}: whatif/table.csv, whatif/predictions.json")
    ui.say_links("whatif", out.run_id, out.session.experiment_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
