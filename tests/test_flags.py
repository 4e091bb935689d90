"""Every entry point's flags come from its config dataclasses (common/flags.py): its `--help` lists
exactly their fields, each described once by the field's docstring."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from analysis.app import AnalysisConfig
from analysis.app import main as analysis_main
from analysis.gate import GateConfig
from analysis.gate import main as gate_main
from common import flags
from common.cli import ArgumentParser
from common.errors import UsageError
from profiling.breakdown.cli import BreakdownCommand
from profiling.cli import ProfileCommand
from profiling.ncu.capture_set import ImportOptions
from profiling.hierarchy.table import TableOptions
from profiling.cli import main as profiling_main
from profiling.ncu.command import CaptureOptions
from profiling.peaks.__main__ import main as peaks_main
from profiling.peaks.config import PeaksConfig
from train.__main__ import TrainCommand
from train.__main__ import main as train_main
from train.complexity.__main__ import ComplexityCommand
from train.complexity.__main__ import main as complexity_main
from train.complexity.config import ComplexityConfig
from train.config import DISTRIBUTED_FIELDS, TrainConfig
from train.sweep.__main__ import SweepCommand
from train.sweep.__main__ import main as sweep_main
from train.whatif.__main__ import WhatifCommand
from train.whatif.__main__ import main as whatif_main

ONE_PROCESS = [n for n in TrainConfig.__dataclass_fields__ if n not in DISTRIBUTED_FIELDS]
# entry point: (its main, the arguments before --help, its config classes with the fields it takes)
ENTRY_POINTS = {
    "train": (train_main, [], [(TrainConfig, None), (TrainCommand, None)]),
    "train.sweep": (sweep_main, [], [(TrainConfig, None), (SweepCommand, None)]),
    "profiling": (
        profiling_main,
        [],
        [
            (TrainConfig, ONE_PROCESS),
            (CaptureOptions, None),
            (ProfileCommand, None),
            (ImportOptions, None),
            (TableOptions, None),
        ],
    ),
    "profiling --import": (
        profiling_main,
        ["--import", "profile.csv"],
        [
            (TrainConfig, ONE_PROCESS),
            (CaptureOptions, None),
            (ProfileCommand, None),
            (ImportOptions, None),
            (TableOptions, None),
        ],
    ),
    "profiling --breakdown": (
        profiling_main,
        ["--breakdown"],
        [(TrainConfig, None), (BreakdownCommand, None)],
    ),
    "profiling.peaks": (peaks_main, [], [(PeaksConfig, None)]),
    "train.complexity": (
        complexity_main,
        [],
        [(ComplexityConfig, None), (ComplexityCommand, None)],
    ),
    "analysis": (analysis_main, [], [(AnalysisConfig, None)]),
    "train.whatif": (whatif_main, [], [(WhatifCommand, None)]),
    "analysis.gate": (gate_main, [], [(GateConfig, None)]),
}
OPTION_LINE = re.compile(r"^  (-.*?)(?:  |$)")


def listed_flags(help_text: str) -> set[str]:
    """The option strings of the option lines of an argparse --help text."""
    found = set()
    for line in help_text.splitlines():
        m = OPTION_LINE.match(line)
        if m:
            found |= {part.split(" ")[0] for part in m.group(1).split(", ")}
    return found


def help_flags(cls: type, names=None) -> set[str]:
    """Every option string the fields of `cls` (those in `names`) put in --help."""
    return {
        name
        for f in flags.flag_fields(cls, names)
        if not f.metadata.get("hidden")
        for name in (
            *flags.flag_names(f),
            *([f.metadata["negation"]] if "negation" in f.metadata else []),
        )
    }


def help_of(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_help_lists_exactly_the_config_fields(name, capsys):
    main, argv, configs = ENTRY_POINTS[name]
    text = help_of(main, argv, capsys)
    want = {"-h", "--help"}.union(*(help_flags(cls, names) for cls, names in configs))
    got = listed_flags(text)
    assert got == want, f"{name}: not from a field {got - want}, field not listed {want - got}"
    shown = re.sub(r"\s+", "", text)  # argparse wraps lines, after hyphens too
    for cls, names in configs:  # each flag's help is its field's docstring
        for f in flags.flag_fields(cls, names):
            doc = re.sub(r"\s+", "", flags.field_docs(cls).get(f.name, ""))
            if not f.metadata.get("hidden"):
                assert doc and doc[:40].removesuffix(".") in shown, (name, f.name)


def test_a_flag_written_by_hand_is_found(capsys):
    """The comparison above fails on a parser with a flag that no field describes."""
    parser = ArgumentParser(prog="x")
    flags.add_flags(parser, PeaksConfig)
    parser.add_argument("--by-hand", help="written beside the dataclass")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    got = listed_flags(capsys.readouterr().out)
    assert got - {"-h", "--help"} - help_flags(PeaksConfig) == {"--by-hand"}


def test_hidden_field_is_a_flag_left_out_of_help():
    from train.__main__ import build_parser

    assert build_parser().parse_args(["--result-file", "r.json"]).result_file == "r.json"
    assert "--result-file" not in help_flags(TrainCommand)


def _parse(value: str) -> tuple[int, int]:
    major, minor = value.split(".")
    return int(major), int(minor)


@dataclass
class Example:
    """One field of each kind common.flags derives a flag from."""

    size: int = 3
    """a whole number."""
    ratio: float | None = None
    """a number or nothing."""
    on: bool = False
    """a boolean flag that takes true/false."""
    dry: bool = field(default=False, metadata=flags.SWITCH)
    """a switch."""
    names: list[str] = field(default_factory=list, metadata={"sep": ","})
    """a list split at commas."""
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    """a list of whole numbers split at commas and spaces."""
    version: tuple[int, int] | None = field(default=None, metadata={"parse": _parse})
    """parsed by its own function."""
    track: bool = flags.track()
    kind: str = field(default="a", metadata={"flags": ("--kind", "-k"), "choices": ("a", "b")})
    """one of two."""
    internal: str = field(default="x", metadata={"flags": ()})
    """no flag."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")


def example(*argv: str, **kw) -> Example:
    parser = ArgumentParser(prog="example")
    flags.add_flags(parser, Example)
    return flags.build(Example, parser.parse_args(list(argv)), **kw)


def test_each_kind_of_field_parses_as_its_annotation_says():
    assert example() == Example()
    got = example(
        *("--size", "5", "--ratio", "", "--on", "--dry", "--names", "a b,c", "--names", "d"),
        *("--sizes", "4,5", "6", "--version", "8.6", "--no-track", "-k", "b"),
    )
    assert got == Example(
        size=5,
        ratio=None,
        on=True,
        dry=True,
        names=["a b", "c", "d"],
        sizes=[4, 5, 6],
        version=(8, 6),
        track=False,
        kind="b",
    )
    assert example("--on", "false", "--ratio", "0.5").on is False
    assert example("--ratio", "0.5").ratio == 0.5


def test_bad_values_are_one_line_usage_errors_naming_the_flag():
    with pytest.raises(UsageError, match="^--sizes takes whole numbers, got 'x'$"):
        example("--sizes", "1", "x")
    with pytest.raises(UsageError, match="^size must be >= 1, got 0$"):
        example("--size", "0")
    with pytest.raises(UsageError, match="^--size must be >= 1, got 0$"):
        example("--size", "0", as_flags=True)
    with pytest.raises(UsageError, match="argument --kind/-k: invalid choice: 'c'"):
        example("--kind", "c")
    with pytest.raises(UsageError, match="unrecognized arguments: --internal"):
        example("--internal", "y")


def test_check_choices_names_the_field():
    with pytest.raises(ValueError, match="^kind must be one of a, b, got 'c'$"):
        flags.check_choices(Example(kind="c"))


def test_choices_with_a_pattern_take_any_text_as_a_flag_and_are_checked_by_the_config():
    """One declaration: `choices` (+ `choices_pattern`, `choices_text`) gives the flag's choices
    and check_choices' rule and words (TrainConfig's device, precision and zero_stage use it)."""

    @dataclass
    class Picked:
        where: str = field(
            default="cpu", metadata={"choices": ("cpu",), "choices_pattern": (r"gpu:\d+", "gpu:N")}
        )
        """where."""
        stage: int = field(default=0, metadata={"choices": (0, 1), "choices_text": "0 or 1"})
        """a stage."""

    parser = ArgumentParser(prog="picked")
    flags.add_flags(parser, Picked)
    assert parser.parse_args(["--where", "anything"]).where == "anything"  # no argparse choices
    with pytest.raises(UsageError, match="argument --stage: invalid choice: 2"):
        parser.parse_args(["--stage", "2"])  # argparse's choices
    flags.check_choices(Picked(where="gpu:3"))
    with pytest.raises(ValueError, match="^where must be one of cpu or gpu:N, got 'gpu:x'$"):
        flags.check_choices(Picked(where="gpu:x"))
    with pytest.raises(ValueError, match="^stage must be 0 or 1, got 2$"):
        flags.check_choices(Picked(stage=2))
