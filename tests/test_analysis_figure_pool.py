"""analysis/figure_pool.py: figures drawn in the early-started pool processes are the files drawn
in the main process, byte for byte; a failing figure fails the analysis with its own error; the
garbage collector's settings come back after an analysis."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from analysis import core, figures
from analysis.figure_cache import FigureCache
from analysis.figure_pool import FigurePool, quiet_gc
from analysis.figures import FigureJob
from tests.test_analysis_figure_cache import FIGS, runs, vendor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork pools: Linux")


def jobs_for(tmp_path, name: str) -> list:
    analysis = core.build(runs(), vendor)
    return figures.plan(analysis, tmp_path / name / "figures")


def test_pool_draws_the_same_bytes_as_the_main_process(tmp_path):
    serial = figures.render(jobs_for(tmp_path, "serial"), 1)
    pool = FigurePool.start(2)
    try:
        pooled = figures.render(jobs_for(tmp_path, "pooled"), 2, None, pool)
    finally:
        pool.close()
    assert [(s, t) for s, t, _ in pooled] == [(s, t) for s, t, _ in serial]
    assert {p.name for _, _, p in pooled} == FIGS
    for (_, _, a), (_, _, b) in zip(serial, pooled):
        assert a.parent != b.parent and a.read_bytes() == b.read_bytes(), a.name


def test_pool_with_a_cache_draws_only_the_changed_figures_and_keeps_them(tmp_path):
    cache = FigureCache(tmp_path / "cache")
    figures.render(jobs_for(tmp_path, "first"), 1, cache)
    cache = FigureCache(cache.folder)
    pool = FigurePool.start(2)
    try:
        again = figures.render(jobs_for(tmp_path, "again"), 2, cache, pool)
    finally:
        pool.close()
    assert cache.drawn == [] and len(cache.reused) == len(FIGS)
    assert all(p.is_file() for _, _, p in again)


def test_a_figure_that_fails_in_the_pool_raises_its_error_here(tmp_path):
    bad = FigureJob(
        "roofline", "broken", figures.roofline_combined, ("not a frame", {}), tmp_path / "x.png"
    )
    with pytest.raises(Exception) as here:
        figures.render([bad], 1)
    pool = FigurePool.start(2)
    try:
        with pytest.raises(Exception) as there:
            figures.render([bad], 2, None, pool)
    finally:
        pool.close()
    # the drawing's own error, as drawing it here raises it; not a pickling or pool error
    assert (type(there.value), str(there.value)) == (type(here.value), str(here.value))
    assert not (tmp_path / "x.png").exists()


def test_a_pool_given_nothing_or_left_waiting_stops_at_once():
    idle = FigurePool.start(2)
    idle.close()
    assert idle.proc.exitcode is not None
    busy = FigurePool.start(2)
    busy.submit_all(
        [
            FigureJob(
                "roofline", "t", figures.roofline_combined, ("x", {}), Path("/nonexistent/x.png")
            )
        ]
    )
    busy.close()  # the analysis failed before waiting: no figure wanted
    assert busy.proc.exitcode is not None


def test_one_job_or_no_fork_means_no_pool():
    assert FigurePool.start(1) is None and FigurePool.start(0) is None


def test_quiet_gc_restores_the_collector():
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with quiet_gc():
        assert gc.get_threshold()[0] == 7000 and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    gc.freeze()  # a caller that froze its own objects keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        with quiet_gc():
            pass
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()


def test_an_analysis_warms_the_pool_only_when_figures_will_likely_change(
    tracking, tmp_path, monkeypatch
):
    """The first analysis (runs fetched) and --cache off have the figure process import
    matplotlib and draw; a repeat that fetched nothing has it import nothing and copies every
    figure."""
    from analysis import app, figure_pool
    from analysis.fetch import sql
    from tests.test_analysis_sqlite import two_batch_sizes

    # runs whose latest metric is younger than the overlap are fetched again on every repeat (a
    # metric logged after a run ended is seen): with none, the repeat fetches nothing
    monkeypatch.setattr(sql, "METRICS_OVERLAP_MS", 0)
    name = two_batch_sizes()
    started, real = [], figure_pool.FigurePool.warm

    def warm(pool):
        started.append(pool.n) if not pool.warmed else None
        real(pool)

    monkeypatch.setattr(figure_pool.FigurePool, "warm", warm)

    def analyse(out: str, *flags: str):
        argv = ["--no-track", "--experiment", name, "--jobs", "2", "--out", str(tmp_path / out)]
        return app.run(app.config_from_args(app.build_parser().parse_args([*argv, *flags])))

    first = analyse("first")
    assert started == [2] and len(first.drawn_figures) >= 4
    again = analyse("again")
    assert started == [2] and again.drawn_figures == []
    off = analyse("off", "--cache", "off")
    assert started == [2, 2] and len(off.drawn_figures) == len(first.drawn_figures)
    for png in (tmp_path / "first" / "figures").glob("*.png"):
        for other in ("again", "off"):
            assert (tmp_path / other / "figures" / png.name).read_bytes() == png.read_bytes()


@pytest.mark.parametrize("sent", [False, True])
def test_a_pool_stopped_under_the_cli_signal_handlers_prints_no_traceback(capfd, sent):
    """Issue 32: the forked pool inherited common.cli's SIGTERM handler, so `close` (SIGTERM) made
    it print "Process figure-pool: Traceback ... terminated by SIGTERM" after every repeat analysis
    whose figures were all unchanged, and after an interrupt."""
    import time

    from common.cli import stop_signals_interrupt

    with stop_signals_interrupt():
        pool = FigurePool.start(2)
        pool.warm()
        if sent:
            pool.submit_all([("roofline", "t", "plots.roofline_combined", ("x", {}, "/no/x.png"))])
        time.sleep(1.5)  # the pool is importing matplotlib or drawing when it is stopped
        pool.close()
    err = capfd.readouterr().err
    assert pool.proc.exitcode is not None
    assert "Traceback" not in err and "terminated by" not in err, err
