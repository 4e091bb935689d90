"""`python -m analysis.gate`: fail a nightly job on a real regression, never on noise.

    python -m analysis.gate --series nightly-a100 --max-slowdown 3%
    python -m analysis.gate --experiment nightly --series "a100:b64/bf16/224px/resnet50" --order-by torch_version

For each series named (an env label, optionally `:` and a config key or config label; every
device of that env label; every series of the experiments read when none is named), the train runs on the tracking server in run order are tested for
change points (analysis/history.py). A series regressed when its newest level (the runs after its
last change point) is slower than the level before it by more than --max-slowdown, with the 95 %
interval of that ratio above 1 + the threshold as well: a slowdown whose interval reaches below
the threshold is noise as far as these runs can tell.

Exit codes (one line per series on stdout): 0 no series regressed; 1 one or more regressed;
3 none regressed but one or more have too few runs to test (the line says how many they need);
2 bad input (a flag, an unknown experiment, a series with no train runs).
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field

import pandas as pd

from analysis import fetch, history, join, screen
from analysis.fetch import breakdowns
from common import console, flags, fmt
from common.cli import ArgumentParser, cli_entry
from common.errors import UsageError

EXIT_OK, EXIT_REGRESSION, EXIT_INSUFFICIENT = 0, 1, 3


def slowdown(text: str) -> float:
    """'3%' -> 0.03; '0.03' -> 0.03 (a bare number is a fraction, so at most 1)."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"max_slowdown must be like 3% or 0.03, got {text!r}") from None
    if not (0 <= value <= 1) or (not t.endswith("%") and value >= 1):
        raise ValueError(f"max_slowdown must be between 0% and 100% (3% or 0.03), got {text!r}")
    return value


@dataclass
class GateConfig:
    """Which series to gate and how much slower their newest runs may be; each field a flag."""

    series: list[str] = field(
        default_factory=list, metadata={"flags": ("--series",), "sep": ",", "metavar": "SERIES"}
    )
    """series to gate: ENV_LABEL or ENV_LABEL:CONFIG (a config_key or config_label such as
    b8/fp32/64px/resnet18), repeated or comma-separated (default: every series read)."""
    max_slowdown: str = "3%"
    """how much slower than the level before them the newest runs may be (3% or 0.03)."""
    experiments: list[str] = field(
        default_factory=list, metadata={"flags": ("--experiment",), "sep": ",", "metavar": "NAME"}
    )
    """experiment names to read, repeated or comma-separated (default: every experiment)."""
    order_by: str = "start_time"
    """the run order: start_time, or a tag (torch_version, driver_version, git_commit, ...)."""
    max_runs: int = 10000
    """at most this many train runs, latest first."""
    cache: str = field(default="auto", metadata={"choices": fetch.CACHE_MODES})
    """the local cache of fetched runs, as for python -m analysis (auto, refresh, off)."""

    def __post_init__(self) -> None:
        self.threshold = slowdown(self.max_slowdown)
        history.order_column(self.order_by)
        flags.check_choices(self)
        if int(self.max_runs) <= 0:
            raise ValueError(f"max_runs must be a positive integer, got {self.max_runs}")
        for spec in self.series:
            if not spec.strip():
                raise ValueError("series: an empty name")

    def wanted(self) -> list[tuple[str, str]]:
        """(env label, config or '') per --series."""
        out = []
        for spec in self.series:
            env, sep, config = spec.rpartition(":")
            out.append((env, config) if sep and env else (spec, ""))
        return out


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m analysis.gate",
        description="Exit 1 when a series' newest train runs are slower than its level before "
        "them by more than --max-slowdown (95 % interval above it), 0 when not, 3 when a series "
        "has too few runs to tell (docs/analysis.md, 'What changed over time').",
    )
    flags.add_flags(p, GateConfig)
    return p


def verdict(s: history.Series, threshold: float) -> tuple[int, str]:
    """(exit code, line) for one series."""
    if s.status == history.STATUS_SHORT:
        return EXIT_INSUFFICIENT, s.summary()
    if not s.changes:
        return EXIT_OK, f"ok: {s.summary()}"
    c = s.changes[-1]
    iv = c.ratio_ci95
    newest = (
        f"{s.name}: newest {len(c.after.run_ids)} runs {fmt.num(c.ratio)}x the "
        f"{len(c.before.run_ids)} before"
    )
    if c.slower and iv is not None and iv[0] > 1 + threshold:
        return (
            EXIT_REGRESSION,
            f"regression: {newest}, more than {fmt.pct(threshold)} slower: {c.sentence()}",
        )
    why = (
        "faster"
        if not c.slower
        else f"its 95 % interval reaches {fmt.num(iv[0])}x, within {fmt.pct(threshold)}"
        if iv is not None
        else "no interval (a side lacks its CI)"
    )
    return EXIT_OK, f"ok: {newest} ({why}): {c.sentence()}"


def selected(train, wanted: list[tuple[str, str]]):
    """The train runs of the series named (all without a name); UsageError for a name with none."""
    if not wanted:
        return train
    keep = None
    for env, config in wanted:
        m = train["env_label"] == env
        if config:
            m &= (train["config_key"] == config) | (train["config_label"] == config)
        if not m.any():
            raise UsageError(
                f"--series {env}{':' + config if config else ''}: no FINISHED train run of it"
                " on this tracking server (env labels there: "
                f"{', '.join(sorted(set(train['env_label']))[:10]) or 'none'})"
            )
        keep = m if keep is None else keep | m
    return train[keep]


def with_modules(found: history.History, query: fetch.Query, source: fetch.Source) -> list[str]:
    """Each change with breakdown runs of its series on both sides gets the modules whose time
    moved most (read only when a series has a change). Returns notes on runs left out."""
    notes: list[str] = []
    if not any(s.changes for s in found.series):
        return notes
    pairs = history.breakdown_pairs(found, breakdowns.breakdown_runs(query, source))
    records = {r["run_id"]: r for pair in pairs.values() for r in pair}
    kept, left_out = screen.breakdowns(breakdowns.read(list(records.values()), notes))
    layers = {f["run_id"]: pd.read_csv(io.StringIO(f["layers"])) for f in kept if f.get("layers")}
    history.add_modules(found, pairs, layers)
    return notes + left_out


def gate(cfg: GateConfig) -> int:
    envs = sorted({env for env, _ in cfg.wanted()})
    query = fetch.Query(cfg.experiments, "", envs, int(cfg.max_runs))
    source = fetch.Source(cfg.cache)
    runs, _ = fetch.fetch_runs(query, source)
    runs, _ = screen.runs(runs)
    runs, _ = screen.values(runs)
    train = selected(join.train_runs(runs), cfg.wanted())
    found = history.scan(train, cfg.order_by)
    for note in found.notes + with_modules(found, query, source):
        console.note(note)
    codes = []
    for s in found.series:
        code, line = verdict(s, cfg.threshold)
        codes.append(code)
        console.result(line)
    if EXIT_REGRESSION in codes:
        return EXIT_REGRESSION
    return EXIT_INSUFFICIENT if EXIT_INSUFFICIENT in codes else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return gate(flags.build(GateConfig, build_parser().parse_args(argv), as_flags=True))


cli = cli_entry(main)

if __name__ == "__main__":
    sys.exit(cli())
