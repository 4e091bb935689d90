"""analysis/figure_cache.py and figures.render with a cache: a figure is drawn again exactly when
what it draws changed, else copied byte for byte.

Two environments ("a" and "b", one GPU each) with fp32 and bf16 runs at two batch sizes: nine
figures less the scaling one (no distributed runs) and the variability one (not asked for):
speed-up, intensity, throughput, all-environment roofline, one roofline per environment.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from analysis import core, figures
from analysis.figure_cache import FigureCache, digest
from roofline.model import Roof
from tests.test_analysis_join import train

FIGS = {
    "speedup_vs_batch.png",
    "intensity_vs_batch.png",
    "throughput_vs_batch.png",
    "roofline_all.png",
    "roofline_a.png",
    "roofline_b.png",
}


def vendor(name):
    return {
        "flops_per_s": {"fp32": 30e12, "bf16": 120e12},
        "dram_bytes_per_s": 300e9,
        "source": "datasheet",
    }


def runs(thr_b8_fp32_in_b: float = 100.0, extra: list | None = None) -> pd.DataFrame:
    rows = []
    for env in ("a", "b"):
        for batch in (8, 16):
            for prec, speed in (("fp32", 1.0), ("bf16", 2.0)):
                thr = thr_b8_fp32_in_b if (env, batch, prec) == ("b", 8, "fp32") else 100.0
                thr *= speed * batch / 8
                rows.append(
                    train(
                        f"{env}{batch}{prec}",
                        env,
                        f"GPU-{env}",
                        batch,
                        prec,
                        thr,
                        achieved=thr * 1e10,
                        intensity=10.0 * batch,
                    )
                )
    return pd.DataFrame(rows + (extra or []))


def draw(tmp_path, name: str, frame: pd.DataFrame, cache: FigureCache) -> dict:
    analysis = core.build(frame, vendor)
    jobs = figures.plan(analysis, tmp_path / name / "figures")
    cache.drawn.clear()
    drawn = figures.render(jobs, 1, cache)
    assert {p.name for _, _, p in drawn} == FIGS and all(p.is_file() for _, _, p in drawn)
    return {p.name: p.read_bytes() for _, _, p in drawn}


@pytest.fixture
def cache(tmp_path):
    return FigureCache(tmp_path / "cache")


def test_unchanged_inputs_redraw_no_figure_and_copy_each_byte_for_byte(tmp_path, cache):
    first = draw(tmp_path, "first", runs(), cache)
    assert {p.name for p in cache.drawn} == FIGS and len(list(cache.folder.glob("*.png"))) == 6
    again = draw(tmp_path, "again", runs(), FigureCache(cache.folder))  # a new analysis
    assert again == first
    # the runs in another order: the points drawn are the same, so is each figure
    shuffled = runs().sample(frac=1, random_state=1).reset_index(drop=True)
    later = FigureCache(cache.folder)
    assert draw(tmp_path, "shuffled", shuffled, later) == first and later.drawn == []
    assert len(later.reused) == 6


def test_a_changed_run_redraws_exactly_the_figures_that_show_it(tmp_path, cache):
    draw(tmp_path, "first", runs(), cache)
    changed = FigureCache(cache.folder)
    out = draw(tmp_path, "changed", runs(thr_b8_fp32_in_b=80.0), changed)
    # throughput and achieved FLOP/s of one point in b: its rooflines, throughput, speed-up
    assert {p.name for p in changed.drawn} == {
        "throughput_vs_batch.png",
        "speedup_vs_batch.png",
        "roofline_all.png",
        "roofline_b.png",
    }
    assert len(changed.reused) == 2 and out["roofline_a.png"]
    # a run with no throughput and no intensity in a: a point no figure draws; nothing redrawn
    blank = train("blank", "a", "GPU-a", 32, "fp32", float("nan"))
    quiet = FigureCache(cache.folder)
    draw(tmp_path, "blank", runs(thr_b8_fp32_in_b=80.0, extra=[blank]), quiet)
    assert quiet.drawn == []


def test_other_drawing_code_or_cache_off_draws_again(tmp_path, cache, monkeypatch):
    draw(tmp_path, "first", runs(), cache)
    other = FigureCache(cache.folder)
    other.code = "another version of analysis/plots.py"
    draw(tmp_path, "code", runs(), other)
    assert {p.name for p in other.drawn} == FIGS
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "c2"))
    assert FigureCache.for_mode("off") is None
    FigureCache.for_mode("auto").folder.mkdir(parents=True)
    (tmp_path / "c2" / "figures" / "old.png").write_bytes(b"x")
    assert not list(FigureCache.for_mode("refresh").folder.glob("*.png"))  # emptied


def test_digests_follow_values_not_identity():
    df = pd.DataFrame({"x": [1.0, float("nan")], "s": ["a", None]})
    roof = Roof("GPU", {"fp32": 1e12}, {"dram": 1e11}, {"flops:fp32": "measured"})
    base = digest("plots.f", (df, {"roof": roof, ("a", "b"): [1, 2]}))
    same = digest("plots.f", (df.copy(), {("a", "b"): [1, 2], "roof": roof}))
    assert base == same
    assert digest("plots.g", (df, {"roof": roof, ("a", "b"): [1, 2]})) != base
    assert digest("plots.f", (df.assign(x=[1.0, 2.0]), {"roof": roof, ("a", "b"): [1, 2]})) != base
    roof2 = Roof("GPU", {"fp32": 2e12}, {"dram": 1e11}, {"flops:fp32": "measured"})
    assert digest("plots.f", (df, {"roof": roof2, ("a", "b"): [1, 2]})) != base
    assert digest("plots.f", (object(),)) is None  # no value digest: drawn every time


def test_the_cache_keeps_the_most_recently_used_figures(tmp_path, cache):
    cache.folder.mkdir(parents=True)
    for i in range(5):
        p = cache.folder / f"{i}.png"
        p.write_bytes(b"png")
        os.utime(p, (1000 + i, 1000 + i))
    cache.prune(keep=2)
    assert sorted(p.name for p in cache.folder.glob("*.png")) == ["3.png", "4.png"]


def test_a_column_of_lists_has_a_digest_that_follows_its_values():
    """A point's run_ids is a list per row: pandas cannot hash it (TypeError: unhashable type:
    'list', which ended an analysis of a store with a sweep and a data-parallel run)."""
    a = pd.DataFrame({"run_ids": [["r1", "r2"], ["r3"]], "x": [1.0, 2.0]})
    same = pd.DataFrame({"run_ids": [["r1", "r2"], ["r3"]], "x": [1.0, 2.0]})
    other = pd.DataFrame({"run_ids": [["r1", "r2"], ["r4"]], "x": [1.0, 2.0]})
    assert digest("f", (a,)) is not None
    assert digest("f", (a,)) == digest("f", (same,))
    assert digest("f", (a,)) != digest("f", (other,))
    assert digest("f", (a["run_ids"],)) != digest("f", (other["run_ids"],))


def test_a_cut_or_replaced_kept_figure_is_drawn_again(tmp_path, cache):
    """Issue 32: a kept PNG cut to 100 bytes was "unchanged, copied" into every report (and logged
    as an artifact) until `--cache refresh`."""
    from analysis.figure_cache import whole_png

    first = draw(tmp_path, "first", runs(), cache)
    kept = sorted(cache.folder.glob("*.png"))
    kept[0].write_bytes(kept[0].read_bytes()[:100])  # cut
    body = bytearray(kept[1].read_bytes())
    body[200] ^= 0xFF  # one byte flipped inside a chunk
    kept[1].write_bytes(bytes(body))
    kept[2].unlink()
    kept[2].mkdir()  # not a file at all
    again = FigureCache(cache.folder)
    assert draw(tmp_path, "again", runs(), again) == first
    assert len(again.drawn) == 3 and len(again.reused) == 3  # the folder one is drawn too
    assert all(whole_png(v) for v in first.values())
    assert not whole_png(b"") and not whole_png(first["roofline_a.png"][:-1])
