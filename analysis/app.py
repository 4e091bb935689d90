"""`python -m analysis`: runs on the tracking server -> figures, tables, report.md and report.html.

argparse -> AnalysisConfig -> fetch (analysis/fetch/) -> build (analysis/core.py, pure) -> figures
(analysis/figures.py) -> tables and report (analysis/report.py, analysis/html.py) -> artifacts of an
`analysis` run. Here: the command's edges (flags, the out-folder check, the run's name,
description and artifacts) around the one `run`; every computation is in the modules named.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from analysis import answers
from analysis import (
    breakdown,
    core,
    fetch,
    figure_cache,
    figure_pool,
    figures,
    findings,
    hierarchy,
    history,
    history_report,
    out_files,
    report,
    screen,
    whatif,
)
from analysis.fetch.breakdowns import fetch_breakdowns
from analysis.fetch.whatifs import fetch_whatifs
from analysis.findings.records import json_text
from common import console, flags, out_folder, schema, ui
from common.cli import ArgumentParser, cli_entry
from common.errors import BenchError, UsageError
from common.server import display_uri
from common.tracking import RunSession
from roofline import vendor


def whole(text: str) -> int:
    """An integer flag that also takes MLproject's float form ("500.0")."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


@dataclass
class AnalysisConfig:
    """What to analyse and where to put the results; each field is a flag (common.flags)."""

    experiments: list[str] = field(
        default_factory=list, metadata={"flags": ("--experiment",), "sep": ",", "metavar": "NAME"}
    )
    """experiment names to read, repeated or comma-separated (default: every experiment on the
    tracking server)."""
    filter: str = ""
    """MLflow search filter for the train runs, e.g. "params.model = 'resnet18'"."""
    env_labels: list[str] = field(
        default_factory=list, metadata={"flags": ("--env-label",), "sep": ",", "metavar": "LABEL"}
    )
    """only these environments (env_label tags), repeated or comma-separated (default: all)."""
    out: str = "analysis_report"
    """output folder for figures, tables, report.md and report.html."""
    max_runs: int = field(default=10000, metadata={"parse": whole})
    """at most this many train runs, latest first."""
    peaks_file: str = flags.peaks_file()
    track: bool = flags.track()
    variability_config: str = field(default="", metadata={"metavar": "CONFIG_KEY"})
    """config_key for the step-time variability figure (default: the config run in the most
    environments)."""
    jobs: int = field(default=0, metadata={"parse": whole})
    """processes drawing figures (0: up to 4 on Linux, 1 elsewhere)."""
    cache: str = field(default="auto", metadata={"choices": fetch.CACHE_MODES})
    """the local cache of fetched runs ($ROOFLINE_CACHE_DIR, default ~/.cache/roofline-bench):
    auto = use it and fetch only what changed, refresh = forget this tracking server's cache and
    fetch everything, off = fetch everything, keep nothing (docs/analysis.md)."""
    prices: str = field(default="", metadata={"metavar": "FILE"})
    """CSV of USD per hour (columns match = env label or device name, usd_per_hour) over the
    default on-demand GPU prices (analysis/findings/prices.py; docs/analysis.md, "Cost and
    energy")."""
    use_incomplete_profiles: bool = False
    """let a profile that missed a training phase (tag ncu_missing_phase: a forward-only capture)
    give the measured intensity of its config's points; by default they keep the modeled one."""
    order_by: str = "start_time"
    """the run order of "What changed over time": start_time, or a tag (torch_version,
    driver_version, git_commit, ...)."""

    def __post_init__(self) -> None:
        if not str(self.out).strip():
            raise ValueError("out must be a folder path")
        if int(self.max_runs) <= 0:
            raise ValueError(f"max_runs must be a positive integer, got {self.max_runs}")
        self.max_runs = int(self.max_runs)
        if int(self.jobs) < 0:
            raise ValueError(f"jobs must be >= 0 (0 = automatic), got {self.jobs}")
        self.jobs = int(self.jobs)
        flags.check_choices(self)
        history.order_column(self.order_by)
        for label in self.env_labels:  # the one rule train, sweep and peaks apply
            schema.check_label(label, "--env-label")

    def query(self) -> fetch.Query:
        return fetch.Query(self.experiments, self.filter, self.env_labels, self.max_runs)


@dataclass
class Result:
    analysis: core.Analysis
    out_dir: Path
    files: list[Path]
    timings_s: dict[str, float]
    source: fetch.Source
    """what was read, and how (the cache's counts)."""
    findings: findings.Findings | None = None
    drawn_figures: list[str] | None = None
    """file names of the figures drawn (the others were copied from the figure cache)."""
    report: report.Report | None = None
    """everything the report says (analysis/report.py)."""
    history: history.History | None = None
    """the change points of every series (analysis/history.py)"""

    @property
    def notes(self) -> tuple[str, ...]:
        """The report's "What is missing", in order."""
        return self.report.missing if self.report is not None else self.analysis.notes


@dataclass(frozen=True)
class Variability:
    """The step-time box plot: its figure's argument (config label, step times per environment)
    or None, its caption, and what is missing for it."""

    figure: tuple | None = None
    caption: str = ""
    notes: tuple[str, ...] = ()


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m analysis",
        description="Rooflines, tables and a report from train/profile/peaks runs on the MLflow tracking "
        "server (MLFLOW_TRACKING_URI, default sqlite:///mlflow.db).",
    )
    flags.add_flags(p, AnalysisConfig)
    return p


def config_from_args(args: argparse.Namespace) -> AnalysisConfig:
    return flags.build(AnalysisConfig, args)


def run(cfg: AnalysisConfig, vendor_lookup: Callable | None | str = "auto") -> Result:
    """Fetch, join, draw, judge and write. `vendor_lookup='auto'`: roofline.vendor.find with
    --peaks-file passed through (tests inject a stub instead). The figure processes
    (analysis/figure_pool.py) import matplotlib while the runs are fetched or joined."""
    n_jobs = cfg.jobs or figures.default_jobs()
    with figure_pool.quiet_gc():
        pool = figure_pool.FigurePool.start(n_jobs)  # forked while this process is small
        try:
            return _run(cfg, vendor_lookup, n_jobs, pool)
        finally:
            if pool is not None:
                pool.close()


def _run(cfg: AnalysisConfig, vendor_lookup, n_jobs: int, pool) -> Result:
    """run's body; the figure process `pool` (figure_pool.FigurePool or None) is told to import
    matplotlib at once when every figure will be drawn (--cache off or refresh), else once the
    fetch has read a new or changed run (with none, the figures are most likely all in the figure
    cache: one that is not is drawn by the pool all the same)."""
    if pool is not None and cfg.cache != "auto":
        pool.warm()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if vendor_lookup == "auto":
        vendor_lookup = vendor.load_vendor_lookup(cfg.peaks_file)
    query = cfg.query()
    source = fetch.Source(cfg.cache)
    runs, complexity, breakdowns, whatifs, fetch_notes = _fetch(query, source)
    timings["fetch_s"] = time.perf_counter() - t0
    if pool is not None and source.stats.fetched:
        pool.warm()

    t = time.perf_counter()
    analysis = core.build(
        runs, vendor_lookup, complexity, cfg.use_incomplete_profiles, notes=fetch_notes
    )
    timings["join_s"] = time.perf_counter() - t
    console.info(
        f"joined {analysis.counts['train']} train, {analysis.counts['profile']} profile, "
        f"{analysis.counts['peaks']} peaks runs into {analysis.counts['points']} points"
    )

    hist = _history(cfg, analysis, query, source, timings)
    t = time.perf_counter()
    out_dir = Path(cfg.out)
    variability = _variability(analysis, cfg, source, timings)
    cache = figure_cache.FigureCache.for_mode(cfg.cache)
    with out_files.writing(out_dir):
        jobs = figures.plan(analysis, out_dir / "figures", variability.figure)
        pending = figures.Pending(jobs, n_jobs, cache, pool)
        timings["figures_s"] = time.perf_counter() - t

        # the findings are built while the pool draws
        found = _findings(cfg, analysis, breakdowns, source, out_dir, timings, hist, whatifs)

        t = time.perf_counter()
        drawn, files = _drawn(analysis, out_dir, pending, n_jobs)
        drawn_names = [p.name for p in (cache.drawn if cache is not None else files)]
        files.append(out_dir / "findings.json")
        timings["figures_s"] += time.perf_counter() - t

        t = time.perf_counter()
        rep, written = _write_report(
            analysis, out_dir, drawn, query.describe(), variability, breakdowns, found, source,
            vendor_lookup, hist, whatifs,
        )  # fmt: skip
        files += written
        out_files.tidy(out_dir, files)  # the files an earlier analysis wrote there: not this one's
    timings["report_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0
    return Result(analysis, out_dir, files, timings, source, found, drawn_names, rep, hist)


def _history(cfg, analysis, query, source, timings: dict) -> history.History:
    """Every series' change points, with the breakdown modules that moved at each (read only for
    a series with a change); its notes (for "What is missing") in its `notes`."""
    from analysis.gate import with_modules

    t = time.perf_counter()
    found = history.scan(analysis.train, cfg.order_by)
    found.notes += with_modules(found, query, source)
    timings["history_s"] = time.perf_counter() - t
    return found


def _fetch(query: fetch.Query, source: fetch.Source) -> tuple:
    """(runs, complexity tables, breakdown runs, what-if runs, notes on what was read); UsageError
    when no train run matches."""
    runs, notes = fetch.fetch_runs(query, source)
    n_train = 0 if runs.empty else int((runs.get("tags.run_kind") == "train").sum())
    if n_train == 0:
        raise UsageError(no_match(query))
    complexity, complexity_notes = fetch.fetch_complexity(query, source)
    notes += complexity_notes
    breakdowns, screened = screen.breakdowns(fetch_breakdowns(query, source, notes))
    whatifs, screened_whatifs = screen.whatifs(fetch_whatifs(query, source, notes))
    return runs, complexity, breakdowns, whatifs, notes + screened + screened_whatifs


def no_match(query: fetch.Query) -> str:
    return (
        f"no train runs match ({query.describe()}) on {display_uri()}; "
        "check the names with `mlflow ui` or loosen --filter/--env-label"
    )


def _drawn(
    analysis: core.Analysis, out_dir: Path, pending: figures.Pending, n_jobs: int
) -> tuple[dict[str, list[tuple[str, str]]], list[Path]]:
    """Wait for every figure under out_dir/figures (figures.Pending: those whose inputs are
    unchanged were copied from the figure cache): ({section: [(title, relative path)]}, files)."""
    drawn: dict[str, list[tuple[str, str]]] = {}
    files: list[Path] = []
    for section, title, path in pending.finish():
        drawn.setdefault(section, []).append((title, str(path.relative_to(out_dir))))
        files.append(path)
    cache, n_all = pending.cache, len(pending.jobs)
    n = len(pending.todo)
    console.info(
        f"drew {n} of {n_all} figures for {len(analysis.roofs)} environment(s)"
        + (f" in {min(n_jobs, n)} processes" if min(n_jobs, n) > 1 else "")
        + (f"; {n_all - n} unchanged, copied from {cache.folder}" if n < n_all else "")
    )
    return drawn, files


def _write_report(
    analysis: core.Analysis,
    out_dir: Path,
    drawn: dict,
    query: str,
    variability: Variability,
    breakdowns: list[dict],
    found: findings.Findings,
    source: fetch.Source,
    vendor_lookup,
    changes: history.History | None = None,
    whatifs: list[dict] = (),
) -> tuple[report.Report, list[Path]]:
    """The Report (everything it says: the analysis, the findings, the breakdown runs, the
    profiles' hierarchical rooflines, the figures) and the files written from it under `out_dir`:
    the tables, report.md and report.html (figures embedded). "What is missing" ends with what
    the steps after the join add, the cache's housekeeping note last."""
    hier, hier_notes = hierarchy.collect(
        analysis.runs, analysis.roofs, vendor_lookup, out_dir / "figures"
    )
    b = breakdown.build(breakdowns)
    shaky = answers.unstable_keys(found.configs) if found is not None else frozenset()
    files = report.write_tables(analysis, out_dir, shaky) + breakdown.write_files(b, out_dir)
    figs = {**drawn, "hierarchical": [(h["title"], h["figure"]) for h in hier]}
    if not b.runs.empty:  # breakdown_plot imports matplotlib (through profiling.breakdown)
        from analysis import breakdown_plot

        png = breakdown_plot.parts_by_run(b.runs, out_dir / "figures" / "breakdown_parts.png")
        figs["breakdown"] = [("Step parts per breakdown run", str(png.relative_to(out_dir)))]
        files.append(png)
    figs["whatif"] = whatif.figures(list(whatifs), out_dir, files)
    pngs = history_report.figures(changes, out_dir / "figures") if changes is not None else []
    figs["history"] = [(title, str(p.relative_to(out_dir))) for title, p in pngs]
    files += [p for _, p in pngs]
    last = source.note()
    rep = report.Report(
        analysis,
        figs,
        display_uri(),
        query,
        dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        variability.caption,
        found,
        b,
        tuple(hier),
        whatifs=tuple(whatifs),
        history=changes,
        notes=(
            *(changes.notes if changes is not None else ()),
            *variability.notes,
            *hier_notes,
            *b.notes,
            *found.missing,
            *([last] if last else []),
        ),
    )
    return rep, files + [h["path"] for h in hier] + report.write(rep, out_dir)


def _tell_experiment(session, result: Result) -> None:
    """The analysis's answer as the first paragraph of its experiment's description, which MLflow
    shows above every tab of the experiment page (common.ui.set_answer: only while the
    description is the commands' own), and as the run's tag `analysis_fastest` (a column of the
    analyses' saved view)."""
    if session.offline or not result.findings or not result.findings.configs:
        return
    names = answers.run_names(result.analysis.train)
    text = answers.answer_paragraph(result.findings.configs, names)
    session.set_tags({"analysis_fastest": text[:4900]})
    from common.runs import mlflow_client

    link = ui.run_path(session.run_id, session.experiment_id, REPORT_ARTIFACT)
    ui.set_answer(
        mlflow_client(), session.experiment_id, f"{ui.ANSWER_MARK} ([report]({link})): {text}"
    )


def _findings(
    cfg, analysis, breakdowns, source, out_dir: Path, timings: dict, changes=None, whatifs=()
) -> findings.Findings:
    """The findings engine over the joined analysis, with the step-time series of variable runs,
    the fetched breakdown runs and the what-if runs' checks; writes findings.json."""
    t = time.perf_counter()
    series = fetch.fetch_series(findings.series_wanted(analysis.train), source=source)
    found = findings.build(analysis, findings.read_prices(cfg.prices), breakdowns, series, whatifs)
    timings["findings_s"] = time.perf_counter() - t
    path = out_dir / "findings.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    data = found.to_json()
    if changes is not None:  # the change points over time (analysis/history_report.py)
        data["changes"] = history_report.to_json(changes)
    path.write_text(json_text(data))
    return found


def _variability(
    analysis: core.Analysis, cfg: AnalysisConfig, source: fetch.Source, timings: dict
) -> Variability:
    """The step-time box plot of the config run in the most environments (or the one asked for);
    fetches the series of the plotted runs only."""
    key = core.variability_config(analysis, cfg.variability_config or None)
    notes = []
    if cfg.variability_config and key is None:
        notes.append(
            f"--variability-config {cfg.variability_config}: no train run has that config_key"
        )
    if not key:
        return Variability(notes=tuple(notes))
    vr = core.variability_runs(analysis, key)
    t = time.perf_counter()
    series, dropped = screen.series(fetch.fetch_series(list(vr["run_id"]), source=source))
    notes += dropped
    timings["series_fetch_s"] = time.perf_counter() - t
    by_env: dict[tuple[str, str], list[float]] = {}
    for r in vr.to_dict("records"):
        by_env.setdefault((r["env_label"], r["device_name"]), []).extend(
            series.get(r["run_id"], [])
        )
    empty = [e for e, v in by_env.items() if not v]
    if empty:
        notes.append(
            f"no step_time_s series logged for config {key} in {', '.join(e for e, _ in empty)}"
        )
    pts = analysis.points
    label = next(iter(pts.loc[pts["config_key"] == key, "label"]), key)
    caption = (
        f"Config `{label}` (config_key {key}), the config run in the most environments; "
        f"per-step times of up to 5 latest runs per environment."
    )
    return Variability((label, by_env), caption, tuple(notes))


REPORT_FOLDER = "report"
REPORT_ARTIFACT = f"{REPORT_FOLDER}/report.html"
"""where the analysis run holds its report (the link the command prints opens it)"""


def _log(session, cfg: AnalysisConfig, result: Result) -> None:
    for path in result.files:
        rel = path.relative_to(result.out_dir)
        session.log_file(str(Path(REPORT_FOLDER) / rel), path)
    c = result.analysis.counts
    session.log_metrics(
        {
            **{f"n_{k}_runs": c[k] for k in ("train", "profile", "peaks", "failed", "screened")},
            **{f"n_{k}": c[k] for k in ("points", "measured_points", "modeled_points")},
            "n_cached_runs": result.source.stats.from_cache,
            "n_fetched_runs": result.source.stats.fetched,
            **{f"analysis_{k}": v for k, v in result.timings_s.items()},
        }
    )


def _draw_run_rooflines(result: Result) -> None:
    """roofline.png, bound and fraction of roof on the train runs read that were drawn against
    other ceilings than analysis now holds them against, or none (analysis/run_rooflines.py)."""
    from analysis import run_rooflines

    keep = result.source.mode != "off"
    folder = fetch.segments.server_folder(result.source.uri)
    ledger = run_rooflines.load_ledger(folder) if keep else {}
    a = result.analysis
    todo, more = run_rooflines.plan(a.train, a.roofs, ledger)
    if not todo:
        return
    console.info(f"drawing roofline.png for {len(todo)} train run(s) made before these ceilings")
    done, notes = run_rooflines.apply(todo)
    for note in notes:
        console.warn(note)
    unsaved = run_rooflines.save_ledger(folder, {**ledger, **done}) if keep and done else ""
    if unsaved:
        console.warn(
            f"could not keep the list of redrawn runs ({unsaved}): the next analysis redoes them"
        )
    if more:
        console.note(f"{more} more train run(s) get their roofline.png at the next analysis")


def _raise_if_no_points(result: Result) -> None:
    if result.analysis.counts["points"] == 0:
        raise BenchError(
            f"no FINISHED train runs among the matches ({result.analysis.counts['failed']} failed); "
            f"failures listed in {result.out_dir / 'report.html'}"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    fetch.check_filter(cfg.filter)  # bad input ends here, before an analysis run exists
    fetch.check_store()
    if cfg.experiments:  # a typo must not become an experiment holding a FAILED analysis run
        fetch.experiment_ids(cfg.experiments)
    with out_folder.locked(out_files.check_out_dir(cfg.out), "--out", "analysis"):
        return _analyse(cfg)


def _analyse(cfg: AnalysisConfig) -> int:
    """The analysis of main, its --out claimed and locked: the last checks, then the run."""
    findings.read_prices(cfg.prices)
    if cfg.peaks_file:  # a missing or bad file: one line, before any run (main: a FAILED run)
        vendor.load_overrides(cfg.peaks_file)
    if cfg.track and not fetch.any_train_run(cfg.query()):
        raise UsageError(no_match(cfg.query()))  # main: a FAILED analysis run saying so

    if cfg.track:
        tags = {
            schema.TAG_HOST: schema.host_name(),
            schema.TAG_ENV_LABEL: schema.default_env_label(),
        }
        with RunSession(
            "analysis",
            experiment=cfg.experiments[0] if cfg.experiments else None,
            run_name=run_name(cfg),
            tags=tags,
        ) as session:
            session.log_params(
                {
                    "experiments": ",".join(cfg.experiments) or "all",
                    "filter": cfg.filter[:500],
                    "env_labels": ",".join(cfg.env_labels) or "all",
                    "max_runs": cfg.max_runs,
                    "peaks_file": cfg.peaks_file or "none",
                    "out": cfg.out,
                    "cache": cfg.cache,
                    "prices": cfg.prices or "default table",
                }
            )
            session.flush()
            result = run(cfg)
            _log(session, cfg, result)
            _draw_run_rooflines(result)
            session.set_note(run_note(cfg, result))
            _tell_experiment(session, result)
            _raise_if_no_points(result)
        where = f"; logged to run {session.run_id}" if session.run_id else ""
    else:
        result = run(cfg)
        _raise_if_no_points(result)
        where = ""
    for note in result.notes:
        console.note(note)
    console.result(
        f"{summary_line(result)}; report: {result.out_dir / 'report.html'} "
        f"({result.timings_s['total_s']:.1f} s){where}"
    )
    if where:
        ui.say_links("analysis", session.run_id, session.experiment_id, REPORT_ARTIFACT)
    return 0


def summary_line(result: Result) -> str:
    """What an analysis found: runs read per kind, environments, points, failures."""
    c = result.analysis.counts
    n_envs = len(result.analysis.roofs)
    return (
        f"analysed {c['train']} train, {c['profile']} profile, {c['peaks']} peaks runs ({n_envs} environment(s)) -> "
        f"{c['points']} points ({c['measured_points']} measured, {c['modeled_points']} modeled intensity), "
        f"{c['failed']} failed run(s)"
    )


def run_name(cfg: AnalysisConfig) -> str:
    """`analysis-<experiments>[-<env labels>][-filtered]`: what the analysis read."""
    envs = "+".join(cfg.env_labels)
    parts = ["+".join(cfg.experiments) or "all", envs, "filtered" if cfg.filter else ""]
    return ui.run_name([p for p in parts if p], kind="analysis")


def run_note(cfg: AnalysisConfig, result: Result) -> str:
    """The analysis run's description: the summary line, then what it read and the environments."""
    envs = sorted({f"{env} ({dev})" for env, dev in result.analysis.roofs})
    heads = findings.report.description_lines(result.findings) if result.findings else []
    return "\n".join(
        [
            summary_line(result),
            "",
            *(["Headline findings:", *heads, ""] if heads else []),
            f"Read: experiments {', '.join(cfg.experiments) or 'all'}; env labels "
            f"{', '.join(cfg.env_labels) or 'all'}; filter {cfg.filter or 'none'}; at most "
            f"{cfg.max_runs} train runs.",
            f"Environments: {'; '.join(envs) or 'none'}.",
            "Report: report/report.html in the Artifacts tab (figures embedded); figures and "
            "tables under report/.",
        ]
    )


cli = cli_entry(main)
