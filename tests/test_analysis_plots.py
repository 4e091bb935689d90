"""analysis.plots: what the roofline figures draw, read back from the Line2D objects of Agg figures.

One device, "GPU": a peaks run measured fp32 = 20 TFLOP/s, DRAM = 250 GB/s and L2 = 1.2 TB/s; the
vendor entry says fp32 = 30.3, fp16 = bf16 = 121 TFLOP/s and 300 GB/s. The roof efficiency is
computed against is therefore fp32 20e12 (measured), bf16 121e12 (vendor) over 250e9 (measured):
ridges 20e12 / 250e9 = 80 and 121e12 / 250e9 = 484 FLOP/byte.
"""

from __future__ import annotations

import itertools

import matplotlib.image as mpimg
import pandas as pd
import pytest

from analysis import core, plots
from roofline import plot as roofline_plot
from tests.test_analysis_join import peaks, train

GPU = "GPU"


def vendor(name):
    if name == GPU:
        return {
            "flops_per_s": {"fp32": 30.3e12, "fp16": 121e12, "bf16": 121e12},
            "dram_bytes_per_s": 300e9,
            "source": "datasheet",
        }
    return None


@pytest.fixture
def analysis():
    rows = [
        train(
            "a", "gpu-box", GPU, 32, "fp32", 400, thr_sd=10, achieved=11e12, intensity=50
        ),  # modeled
        train(
            "b", "gpu-box", GPU, 64, "fp32", 700, thr_sd=10, achieved=15e12, intensity=60
        ),  # measured below
        train("c", "gpu-box", GPU, 64, "bf16", 1400, thr_sd=10, achieved=20e12, intensity=100),
        peaks(
            "p",
            "gpu-box",
            GPU,
            1,
            peak_flops_per_s_fp32=20e12,
            peak_dram_bytes_per_s=250e9,
            peak_l2_bytes_per_s=1.2e12,
        ),
    ]
    prof = {
        "run_id": "q",
        "status": "FINISHED",
        "tags.run_kind": "profile",
        "tags.config_key": rows[1]["tags.config_key"],
        "tags.device_name": GPU,
        "metrics.ncu_flops_total": 2e12,
        "metrics.ncu_dram_bytes": 1e10,
        "metrics.ncu_l2_bytes": 2e11,
    }
    return core.build(pd.DataFrame([*rows, prof]), vendor)


def lines(fig) -> dict[str, object]:
    return {ln.get_gid(): ln for ln in fig.axes[0].get_lines() if ln.get_gid()}


def test_combined_roofline_styles_each_ceiling_by_its_own_source(analysis):
    fig, n = roofline_plot.draw_roofline_combined(analysis.points, analysis.roofs)
    ln = lines(fig)
    env = "gpu-box|GPU|"
    assert n == 3
    assert ln[env + "flops:fp32"].get_linestyle() == "-"  # measured by the peaks run
    assert ln[env + "bytes:dram"].get_linestyle() == "-"
    assert ln[env + "flops:bf16"].get_linestyle() == "--"  # from the vendor table
    assert list(ln[env + "flops:bf16"].get_ydata()) == [121e12, 121e12]
    assert ln[env + "flops:bf16"].get_xdata()[0] == pytest.approx(
        484
    )  # starts at the roof's own ridge
    legend = {
        t.get_text(): h
        for t, h in zip(
            fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles
        )
    }
    assert legend["ceiling: measured (peaks run)"].get_linestyle() == "-"
    assert legend["ceiling: vendor / peaks file"].get_linestyle() == "--"
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "bf16 121 TFLOP/s, ridge 484 FLOP/B (gpu-box; vendor)" in texts
    assert "fp32 20 TFLOP/s, ridge 80 FLOP/B (gpu-box; measured)" in texts


def test_env_roofline_draws_the_roof_efficiency_uses_with_its_ridges(analysis):
    pts = analysis.points
    assert pts.set_index("precision").loc["bf16", "fraction_of_roof"] == pytest.approx(
        20e12 / (100 * 250e9)
    )
    fig, n = roofline_plot.draw_roofline_env(pts, "gpu-box", GPU, analysis.roofs[("gpu-box", GPU)])
    ln = lines(fig)
    bf16, fp32, dram = ln["roof|flops:bf16"], ln["roof|flops:fp32"], ln["roof|bytes:dram"]
    assert (
        bf16.get_linestyle() == "--"
        and bf16.get_ydata()[0] == 121e12
        and bf16.get_xdata()[0] == pytest.approx(484)
    )
    assert (
        fp32.get_linestyle() == "-"
        and fp32.get_ydata()[0] == 20e12
        and fp32.get_xdata()[0] == pytest.approx(80)
    )
    assert dram.get_linestyle() == "-" and dram.get_ydata()[0] / dram.get_xdata()[
        0
    ] == pytest.approx(250e9)
    assert ln["roof|ridge:bf16"].get_xdata()[0] == pytest.approx(484)
    assert ln["roof|ridge:fp32"].get_xdata()[0] == pytest.approx(80)
    assert "roof|flops:fp16" not in ln  # no point uses fp16
    # the vendor values that a measured one replaced, thinner and dashed; not the vendor bf16 (in use)
    assert (
        ln["vendor|flops:fp32"].get_ydata()[0] == 30.3e12
        and ln["vendor|flops:fp32"].get_linestyle() == "--"
    )
    assert ln["vendor|flops:fp32"].get_linewidth() < fp32.get_linewidth()
    assert ln["vendor|bytes:dram"].get_ydata()[0] / ln["vendor|bytes:dram"].get_xdata()[
        0
    ] == pytest.approx(300e9)
    assert not any(g.startswith("vendor|flops:") and "bf16" in g for g in ln)
    # the L2 ceiling and the L2 point (2e12 FLOPs / 2e11 B = 10 FLOP/B) of the hierarchical roofline
    l2 = ln["roof|bytes:l2"]
    assert l2.get_ydata()[0] / l2.get_xdata()[0] == pytest.approx(1.2e12)
    assert list(ln["points:l2"].get_xdata()) == [10]
    assert list(ln["points:l2"].get_ydata()) == [pytest.approx(15e12)]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {
        "bf16 121 TFLOP/s (vendor)",
        "fp32 20 TFLOP/s (measured)",
        "fp32 30.3 TFLOP/s (vendor, not used)",
        "ridge bf16\n484 FLOP/B",
        "L2 1.2 TB/s (measured)",
    } <= set(texts)


def test_ceiling_labels_do_not_overlap_each_other_or_the_points(analysis):
    # measured fp32 28 TFLOP/s next to the vendor's 30.3: the two labels would sit on top of each other
    roofs = analysis.roofs[("gpu-box", GPU)]
    measured = roofs["measured"]
    measured.flops_per_s["fp32"] = 28e12
    roofs["roof"].flops_per_s["fp32"] = 28e12
    fig, _ = roofline_plot.draw_roofline_env(analysis.points, "gpu-box", GPU, roofs)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ceilings = [
        t
        for t in ax.texts
        if "FLOP/s" in t.get_text() or "B/s" in t.get_text() or "ridge" in t.get_text()
    ]
    assert len(ceilings) >= 6
    boxes = [t.get_window_extent(renderer) for t in ceilings]
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not a.overlaps(b), (ceilings[i].get_text(), ceilings[j].get_text())
    xy = ax.transData.transform(
        analysis.points[["intensity_flops_per_byte", "achieved_flops_per_s"]].to_numpy()
    )
    for box, t in zip(boxes, ceilings):
        assert not any(box.contains(x, y) for x, y in xy), t.get_text()


def test_measured_and_modeled_points_differ_in_marker_and_fill_and_the_legend_says_so(
    analysis, tmp_path
):
    for fig, _ in (
        roofline_plot.draw_roofline_env(
            analysis.points, "gpu-box", GPU, analysis.roofs[("gpu-box", GPU)]
        ),
        roofline_plot.draw_roofline_combined(analysis.points, analysis.roofs),
    ):
        ax = fig.axes[0]
        measured = [ln for ln in ax.get_lines() if ln.get_gid() == "points:measured"]
        modeled = [ln for ln in ax.get_lines() if ln.get_gid() == "points:modeled"]
        # b64 fp32 was profiled: 2e12 / 1e10 = 200 FLOP/B; b32 fp32 and b64 bf16 use their modeled 50 and 100
        assert [(list(m.get_xdata()), m.get_marker(), m.get_fillstyle()) for m in measured] == [
            ([200], "o", "full")
        ]
        assert sorted(x for m in modeled for x in m.get_xdata()) == [50, 100]
        assert {(m.get_marker(), m.get_fillstyle()) for m in modeled} == {("^", "none")}
        legend = ax.get_legend()
        handles = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles)}
        meas = handles["intensity measured\n(Nsight Compute counters)"]
        mod = handles["intensity modeled\n(byte model, no counters)"]
        assert (meas.get_marker(), meas.get_fillstyle()) == ("o", "full")
        assert (mod.get_marker(), mod.get_fillstyle()) == ("^", "none")
    path, n = plots.roofline_env(
        analysis.points, "gpu-box", GPU, analysis.roofs[("gpu-box", GPU)], tmp_path / "r.png"
    )
    assert n == 3 and mpimg.imread(path).shape[2] in (3, 4)


def texts_outside(fig) -> list[tuple]:
    """The parts of `fig` drawn beyond its edges (cut off in the PNG): the figure's tight bounding
    box (every drawn text, tick label, legend and title) against the figure, in inches."""
    fig.canvas.draw()  # places every text as the PNG will
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    w, h = fig.get_size_inches()
    eps = 0.01
    out = [("left", box.x0)] if box.x0 < -eps else []
    out += [("bottom", box.y0)] if box.y0 < -eps else []
    out += [("right", box.x1 - w)] if box.x1 > w + eps else []
    return out + ([("top", box.y1 - h)] if box.y1 > h + eps else [])


def test_batch_figures_keep_long_titles_inside_and_error_bars_above_zero():
    """throughput_vs_batch had its title cut on both sides and ±1 SD bars below zero: a point of
    5 samples/s with an SD of 8 now has a bar from 0 to 13 and the title says the bar was cut."""
    rows = [
        train("a", "a-rather-long-environment-label", GPU, 8, "fp32", 5, thr_sd=8),
        train("b", "a-rather-long-environment-label", GPU, 16, "fp32", 40, thr_sd=4),
    ]
    a = core.build(pd.DataFrame(rows), vendor)
    fig = plots.draw_throughput_vs_batch(a.points)
    assert texts_outside(fig) == []
    title = fig._suptitle.get_text()
    assert "\n" in title and "lower bars cut at 0" in title
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:  # the wrapped title stays clear of the panel titles
        assert not top.overlaps(ax.title.get_window_extent(renderer))
    ax = fig.axes[0]
    ys = [y for c in ax.collections for seg in c.get_segments() for _, y in seg]
    assert min(ys) == pytest.approx(0) and max(ys) == pytest.approx(44)  # 5 - 5 .. 40 + 4
    bars = sorted((min(s[:, 1]), max(s[:, 1])) for c in ax.collections for s in c.get_segments())
    assert bars == [pytest.approx((0, 13)), pytest.approx((36, 44))]
    # nothing cut: no such words in the title
    fine = plots.draw_throughput_vs_batch(core.build(pd.DataFrame(rows[1:]), vendor).points)
    assert "cut at 0" not in fine._suptitle.get_text() and texts_outside(fine) == []


def test_roofline_and_variability_texts_stay_inside_the_figure(analysis, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)
    plots.roofline_combined(analysis.points, analysis.roofs, tmp_path / "a.png")
    env = next(iter(analysis.roofs))
    plots.roofline_env(analysis.points, *env, analysis.roofs[env], tmp_path / "b.png")
    plots.step_time_variability(
        {("gpu-box", GPU): [0.1, 0.11, 0.12], ("laptop", "Test CPU 9000"): [1.0, 1.2]},
        "Step-time variability across environments: resnet18/b64/fp32/96px/10cls/cl/compiled",
        tmp_path / "c.png",
    )
    assert len(drawn) == 3
    assert [texts_outside(f) for f in drawn] == [[], [], []]


def _overlapping(fig) -> list[tuple[str, str]]:
    """Pairs of point labels (texts in an axes) whose drawn boxes overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text()]
        for (a, ba), (b, bb) in itertools.combinations(boxes, 2):
            if ba.overlaps(bb):
                out.append((a, b))
    return out


def test_every_figure_is_legible_at_the_artifact_viewers_width_and_labels_do_not_overlap(
    analysis, tmp_path, monkeypatch
):
    """MLflow's artifact viewer shows a figure about 600 px wide on a first visit (900 px once
    its Assistant panel is closed): every text of every figure is at least 8 px high there, no
    figure is wider than the width that keeps its 8-point text so, and no two point labels
    overlap. The figures: the analysis's (both rooflines, the batch panels, the speed-up, the
    variability box plot), the breakdown's two and a train run's own roofline."""
    from profiling.breakdown import figures as bd
    from profiling.breakdown.roof import Ceilings
    from roofline import run_plot
    from roofline.style import FIGURE_WIDTH_IN, LEGIBLE_PX, finish, smallest_text_px
    from tests.test_breakdown import _above_table

    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)
    monkeypatch.setattr(bd, "_png", lambda fig: drawn.append(fig) or b"")
    plots.roofline_combined(analysis.points, analysis.roofs, tmp_path / "a.png")
    env = next(iter(analysis.roofs))
    plots.roofline_env(analysis.points, *env, analysis.roofs[env], tmp_path / "b.png")
    plots.throughput_vs_batch(analysis.points, tmp_path / "c.png")
    plots.intensity_vs_batch(analysis.points, tmp_path / "d.png")
    plots.step_time_variability({env: [0.1, 0.11, 0.12]}, "variability", tmp_path / "e.png")
    c = Ceilings(peak_flops_per_s=1e10, dram_bytes_per_s=1e9, source="vendor: test")
    c.flops_per_s = {"fp32": 1e10}
    bd.layer_roofline(_above_table(), c, "breakdown of net/b8 on a CPU", "host time", clock="x")
    bd.parts_bar({"breakdown_step_s": 1.0, "breakdown_forward_fraction": 1.0}, "t", "x")
    drawn.append(run_plot.draw(analysis.roofs[env]["roof"], "fp32", 1e12, 30.0, "a run"))
    assert len(drawn) == 8
    for fig in drawn:
        finish(fig)  # what every figure gets before it is saved
        width = fig.get_size_inches()[0]
        assert width <= FIGURE_WIDTH_IN + 1e-6, (fig._suptitle, width)
        px, text = smallest_text_px(fig)
        assert px >= LEGIBLE_PX - 1e-6, (px, text)
        assert px <= 2.2 * LEGIBLE_PX  # figures drawn for the viewer: text not raised to fit
        assert _overlapping(fig) == []


def test_axes_are_what_their_titles_say_and_precisions_have_their_own_colours(analysis):
    """speedup_vs_batch.png said "log scale" over a linear axis; roofline_all.png drew bf16 and
    fp32 points of one environment in one colour."""
    from matplotlib.colors import to_hex

    from roofline.style import PRECISION_COLORS

    sp = pd.DataFrame(
        [
            {
                "env_label": "gpu-box",
                "device_name": GPU,
                "label": "resnet18/b64/bf16",
                "batch_size": 64,
                "speedup": 2.0,
                "speedup_ci95_low": 1.5,
                "speedup_ci95_high": 2.6,
            }
        ]
    )
    fig = plots.draw_speedup_vs_batch(sp)
    assert "log axis" in fig._suptitle.get_text() and fig.axes[0].get_yscale() == "log"
    fig, _ = roofline_plot.draw_roofline_combined(analysis.points, analysis.roofs)
    colours = {
        to_hex(ln.get_color())
        for ln in fig.axes[0].get_lines()
        if str(ln.get_gid()).startswith("points:")
    }
    assert colours == {PRECISION_COLORS["fp32"], PRECISION_COLORS["bf16"]}
