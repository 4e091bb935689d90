"""python -m analysis against runs logged to a temporary tracking store.

The store holds two environments:
  l4     (device "NVIDIA L4"):      train runs of resnet18 b32 fp32 (2 repeats), b64 fp32, b64 bf16;
                                    a profile run of b64 fp32; a peaks run; a FAILED train run.
  laptop (device "Test CPU 9000"):  one train run of resnet18 b32 fp32; no peaks anywhere.
Expected values below are computed by hand from the logged numbers.
"""

from __future__ import annotations

import base64
import math
import os
import re
import uuid

import matplotlib.image as mpimg
import mlflow
import pandas as pd
import pytest

from analysis import app, core, fetch, plots
from common import schema
from common.tracking import RunSession
from roofline import vendor

EXP = "bench"
L4 = "NVIDIA L4"
CPU = "Test CPU 9000"


def params(batch: int, precision: str, model: str = "resnet18") -> dict:
    return dict(
        model=model,
        batch_size=batch,
        precision=precision,
        device="cuda",
        warmup_iters=1,
        iters=4,
        image_size=224,
        data="synthetic",
        workers=0,
        channels_last=False,
        compile=False,
        seed=0,
        lr=0.01,
        optimizer="sgd",
        num_classes=1000,
    )


def env_tags(env: str, device: str) -> dict:
    return {
        schema.TAG_ENV_LABEL: env,
        schema.TAG_DEVICE_NAME: device,
        schema.TAG_DEVICE_TYPE: "cuda" if device == L4 else "cpu",
        schema.TAG_HOST: f"{env}-host",
        "torch_version": "2.14.1",
        "cuda_version": "13.0" if device == L4 else "none",
        "python_version": "3.11.9",
    }


def log_train(
    env,
    device,
    batch,
    precision,
    *,
    thr,
    thr_sd,
    flops_step,
    median_s,
    intensity,
    steps=None,
    repeat=None,
    model="resnet18",
    exp=EXP,
):
    p = params(batch, precision, model)
    if repeat is not None:
        p["repeat"] = repeat
    tags = {**env_tags(env, device), schema.TAG_CONFIG_KEY: schema.config_key(p)}
    with RunSession(
        "train", experiment=exp, run_name=f"{model}-b{batch}-{precision}", tags=tags
    ) as s:
        s.log_params(p)
        s.log_metrics(
            {
                "throughput_samples_per_s": thr,
                "throughput_std_samples_per_s": thr_sd,
                "step_time_median_s": median_s,
                "step_time_mean_s": batch / thr,
                "step_time_std_s": 0.001,
                # as train logs them: achieved = FLOPs per step / the MEAN step time (batch / thr);
                # the FLOPs per step chosen so that achieved = flops_step / median_s, the figure the
                # hand-computed values below start from
                "train_flops_per_step": flops_step * (batch / thr) / median_s,
                "achieved_flops_per_s": flops_step / median_s,
                "modeled_intensity_flops_per_byte": intensity,
                "modeled_bytes_per_step": flops_step / intensity,
            }
        )
        s.log_series("step_time_s", steps or [median_s] * 4)
    return s.run_id


def log_profile(device, batch, precision, *, flops, dram_bytes, l2_bytes=None, exp=EXP):
    p = params(batch, precision)
    tags = {**env_tags("l4", device), schema.TAG_CONFIG_KEY: schema.config_key(p)}
    metrics = {
        "ncu_flops_total": flops,
        "ncu_dram_bytes": dram_bytes,
        "ncu_intensity_dram_flops_per_byte": flops / dram_bytes,
        "ncu_kernel_time_s": 1.0,
    }
    if l2_bytes:
        metrics["ncu_l2_bytes"] = l2_bytes
    with RunSession("profile", experiment=exp, tags=tags) as s:
        s.log_params(p)
        s.log_metrics(metrics)


def log_peaks(env, device, metrics, exp=EXP):
    with RunSession("peaks", experiment=exp, tags=env_tags(env, device)) as s:
        s.log_metrics(metrics)


def log_failed(env, device, error):
    with pytest.raises(RuntimeError):
        with RunSession("train", experiment=EXP, run_name="oom", tags=env_tags(env, device)) as s:
            s.log_params(params(512, "fp32"))
            raise RuntimeError(error)


@pytest.fixture
def store(tracking):
    # l4: resnet18 b32 fp32 twice (samples/s 400 and 420; achieved 0.8e12/0.08 = 1e13 and 0.8e12/(0.8/12) = 1.2e13)
    log_train(
        "l4",
        L4,
        32,
        "fp32",
        thr=400,
        thr_sd=10,
        flops_step=0.8e12,
        median_s=0.08,
        intensity=50,
        repeat=0,
        steps=[0.08, 0.081, 0.079, 0.09],
    )
    log_train(
        "l4",
        L4,
        32,
        "fp32",
        thr=420,
        thr_sd=12,
        flops_step=0.8e12,
        median_s=0.8 / 12,
        intensity=50,
        repeat=1,
        steps=[0.066, 0.067, 0.068, 0.07],
    )
    # b64 fp32: achieved 1.5e13; profiled: 2e12 FLOPs / 1e10 B = 200 FLOP/B (L2: 2e12 / 2e9 = 1000)
    log_train(
        "l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1, intensity=60
    )
    log_profile(L4, 64, "fp32", flops=2e12, dram_bytes=1e10, l2_bytes=2e9)
    # b64 bf16: achieved 2e13, modeled intensity 100
    log_train(
        "l4", L4, 64, "bf16", thr=1400, thr_sd=30, flops_step=1.0e12, median_s=0.05, intensity=100
    )
    log_peaks(
        "l4",
        L4,
        {
            "peak_flops_per_s_fp32": 20e12,
            "peak_flops_per_s_bf16": 80e12,
            "peak_dram_bytes_per_s": 250e9,
        },
    )
    log_failed("l4", L4, "CUDA out of memory. Tried to allocate 2.00 GiB")
    # laptop: one run, no peaks
    log_train(
        "laptop",
        CPU,
        32,
        "fp32",
        thr=20,
        thr_sd=1,
        flops_step=0.8e12,
        median_s=1.6,
        intensity=50,
        steps=[1.5, 1.6, 1.7, 1.6],
    )
    return tracking


def complexity_row(
    model, params, fwd_flops, train_flops, act_bytes, max_batch, mem=16 * 2**30
) -> dict:
    """A complexity/models.csv row (columns: train/complexity/tables.py MODEL_COLUMNS, docs/complexity.md)."""
    from train.complexity.tables import MODEL_COLUMNS

    row = dict.fromkeys(MODEL_COLUMNS, 0)
    row.update(
        model=model,
        image_size=224,
        precision="fp32",
        optimizer="sgd",
        num_classes=1000,
        params=params,
        fwd_flops_per_sample=fwd_flops,
        fwd_macs_per_sample=fwd_flops / 2,
        train_flops_per_sample=train_flops,
        activation_bytes_per_sample=act_bytes,
        device_memory_bytes=mem,
        max_batch_fit=max_batch,
        measured_batches="1 2",
    )
    return row


def log_complexity(env, device, rows, source="--device-memory 16GiB", exp=EXP):
    from train.complexity.tables import MODEL_COLUMNS, to_csv

    tags = {schema.TAG_ENV_LABEL: env, schema.TAG_DEVICE_NAME: device}
    with RunSession("complexity", experiment=exp, run_name="complexity", tags=tags) as s:
        s.log_params(
            {
                "models": ",".join(r["model"] for r in rows),
                "device_memory_bytes": rows[0]["device_memory_bytes"],
                "device_memory_source": source,
            }
        )
        s.log_text("complexity/models.csv", to_csv(rows, MODEL_COLUMNS))
    return s.run_id


RESNET18 = complexity_row("resnet18", 11_689_512, 3.64e9, 10.65e9, 22.19e6, 768)
VGG16 = complexity_row("vgg16", 138_357_544, 30.97e9, 92.65e9, 73.36e6, 211)
RESNET18_ROW = (
    "| l4 | NVIDIA L4 | resnet18 | 224 px | fp32 | 1000 | 11.69 M | 3.64 | 1.82 | 10.65 | 22.2 MB | 768 "
    "| 17.2 GB (--device-memory 16GiB) |"
)


class VendorStub:
    device_name = L4
    flops_per_s = {"fp32": 30.3e12, "fp16": 121e12, "bf16": 121e12}
    dram_bytes_per_s = 300e9
    source = "https://www.nvidia.com/en-us/data-center/l4/"


def vendor_stub(name):
    return VendorStub() if name == L4 else None


def analyse(tmp_path, argv=(), vendor_lookup=vendor_stub):
    """The whole pipeline: fetch, join, figures, report (untracked)."""
    cfg = app.config_from_args(
        app.build_parser().parse_args(["--no-track", "--out", str(tmp_path / "out"), *argv])
    )
    return app.run(cfg, vendor_lookup=vendor_lookup)


def joined(argv=(), vendor_lookup=vendor_stub) -> core.Analysis:
    """Fetch and join only (no figures): for tests about numbers. vendor_lookup='auto': the real
    lookup (roofline.vendor) with --peaks-file passed through."""
    cfg = app.config_from_args(app.build_parser().parse_args(["--no-track", *argv]))
    runs, _ = fetch.fetch_runs(cfg.query())
    if vendor_lookup == "auto":
        vendor_lookup = vendor.load_vendor_lookup(cfg.peaks_file)
    return core.build(runs, vendor_lookup, use_incomplete_profiles=cfg.use_incomplete_profiles)


def row(points: pd.DataFrame, env: str, batch: int, precision: str) -> pd.Series:
    sel = points[
        (points["env_label"] == env)
        & (points["batch_size"] == batch)
        & (points["precision"] == precision)
    ]
    assert len(sel) == 1
    return sel.iloc[0]


def test_points_classification_and_efficiency_by_hand(store):
    res = joined(["--experiment", EXP])
    pts = res.points
    assert len(pts) == 4

    a = row(pts, "l4", 32, "fp32")  # repeats: their steps pooled, the SD across runs
    assert a["n_runs"] == 2 and a["throughput_sd_kind"] == "across 2 runs"
    # mean step time over both runs' steps (no measured_iters: alike): (32/400 + 32/420) / 2
    step = (32 / 400 + 32 / 420) / 2
    assert a["step_time_mean_s"] == pytest.approx(step)
    assert a["throughput_mean_samples_per_s"] == pytest.approx(32 / step)
    assert a["throughput_sd_samples_per_s"] == pytest.approx(
        math.sqrt(200)
    )  # (10² + 10²) / (2 - 1)
    # FLOPs per step: 1e13 x 32/400 and 1.2e13 x 32/420 (achieved x each run's mean step time)
    flops = (1e13 * 32 / 400 + 1.2e13 * 32 / 420) / 2
    assert a["achieved_flops_per_s"] == pytest.approx(flops / step)
    assert a["intensity_source"] == "modeled" and a["intensity_flops_per_byte"] == 50
    # ridge fp32 = 20e12 / 250e9 = 80 FLOP/B > 50: memory-bound; attainable 50 * 250e9 = 12.5e12
    assert a["ridge_flops_per_byte"] == pytest.approx(80)
    assert a["bound"] == "memory-bound"
    assert a["attainable_flops_per_s"] == pytest.approx(12.5e12)
    assert a["fraction_of_roof"] == pytest.approx(flops / step / 12.5e12)
    assert a["roof_source"] == "measured"

    b = row(pts, "l4", 64, "fp32")  # profiled: measured intensity 200 >= 80: compute-bound
    assert b["intensity_source"] == "measured" and b["intensity_flops_per_byte"] == pytest.approx(
        200
    )
    assert b["intensity_l2_flops_per_byte"] == pytest.approx(1000)
    assert b["throughput_sd_kind"] == "within run" and b["throughput_sd_samples_per_s"] == 20
    assert b["bound"] == "compute-bound" and b["fraction_of_roof"] == pytest.approx(1.5e13 / 20e12)

    c = row(
        pts, "l4", 64, "bf16"
    )  # bf16 ceiling 80e12, ridge 320 > 100: memory-bound, attainable 25e12
    assert c["ceiling_dtype"] == "bf16" and c["ridge_flops_per_byte"] == pytest.approx(320)
    assert c["bound"] == "memory-bound" and c["fraction_of_roof"] == pytest.approx(2e13 / 25e12)

    d = row(pts, "laptop", 32, "fp32")  # no peaks: no bound, no efficiency
    assert (
        d["bound"] == "" and math.isnan(d["fraction_of_roof"]) and math.isnan(d["peak_flops_per_s"])
    )

    sp = res.speedups
    assert len(sp) == 1 and sp.iloc[0]["speedup"] == pytest.approx(2.0)
    # these runs logged no step-time CI (nor measured_iters to compute one): no interval, never a
    # first-order ± from the samples/s SDs
    assert math.isnan(sp.iloc[0]["speedup_ci95_low"]) and math.isnan(
        sp.iloc[0]["speedup_ci95_high"]
    )

    failed = res.failed
    assert list(failed["error"]) == ["RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"]


def test_outputs_tables_figures_and_report(store, tmp_path):
    res = analyse(tmp_path)
    out = tmp_path / "out"
    csv = pd.read_csv(out / "summary.csv")
    assert len(csv) == 4
    b = csv[
        (csv["env_label"] == "l4") & (csv["batch_size"] == 64) & (csv["precision"] == "fp32")
    ].iloc[0]
    assert b["achieved_flops_per_s"] == pytest.approx(1.5e13)  # raw SI, not rounded
    assert b["intensity_source"] == "measured" and b["bound"] == "compute-bound"
    lap = csv[csv["env_label"] == "laptop"].iloc[0]
    assert pd.isna(lap["fraction_of_roof"]) and lap["intensity_source"] == "modeled"

    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs == [
        "intensity_vs_batch.png",
        "roofline_all.png",
        "roofline_l4.png",
        "roofline_laptop.png",
        "speedup_vs_batch.png",
        "step_time_variability.png",
        "throughput_vs_batch.png",
    ]
    for name in pngs:
        img = mpimg.imread(out / "figures" / name)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300

    md = (out / "report.md").read_text()
    assert f"no peaks for {CPU}" in md
    assert (
        # one uncertainty, the 95% CI of the mean step time (this run logged none), named so everywhere
        "| l4 | NVIDIA L4 | resnet18 | fp32 | 64 | one process | 1 | 700 (1 run) | 15 TFLOP/s | 200 | measured |"
        in md
    )
    assert (
        "| l4 | NVIDIA L4 | resnet18 | fp32 | 32 | one process | 2 | 410 (2 runs 400–420, 95% CI ±31%) | 11 TFLOP/s | 50 | modeled |"
        in md
    )
    assert "CUDA out of memory" in md
    for name in pngs:
        assert f"`figures/{name}`" in md
    assert "](" not in md  # no Markdown link or image: MLflow's artifact view shows them as text
    # report.html: the same report with every figure embedded and nothing linked
    page = (out / "report.html").read_text()
    for name in pngs:
        data = base64.b64encode((out / "figures" / name).read_bytes()).decode()
        assert f'src="data:image/png;base64,{data}"' in page
    assert re.findall(r'\b(?:src|href)="(?!data:image/png;base64,)', page) == []
    assert "<td>RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB</td>" in page
    assert "<td>700 (1 run)</td>" in page
    # the variability figure shows the config both environments ran: resnet18 b32 fp32
    assert "resnet18/b32/fp32" in md.split("## Step-time variability")[1].split("##")[0]
    assert (out / "summary.md").read_text().startswith("| environment |")
    assert res.analysis.counts == {
        "train": 5,
        "profile": 1,
        "peaks": 1,
        "points": 4,
        "measured_points": 1,
        "modeled_points": 3,
        "failed": 1,
        "screened": 0,
    }


def test_report_has_model_complexity_of_the_analysed_models_from_the_latest_run(store, tmp_path):
    log_complexity(
        "l4", L4, [complexity_row("resnet18", 1, 1e9, 3e9, 1e6, 5)], source="old run"
    )  # superseded
    run_id = log_complexity("l4", L4, [RESNET18, VGG16])
    res = analyse(tmp_path)
    cx = res.analysis.complexity
    assert list(cx["model"]) == ["resnet18"] and list(cx["run_id"]) == [
        run_id
    ]  # vgg16 was not analysed
    assert cx.iloc[0]["max_batch_fit"] == 768 and cx.iloc[0]["fwd_macs_per_sample"] == 1.82e9
    md = (tmp_path / "out" / "report.md").read_text()
    section = md.split("## Model complexity")[1].split("\n## ")[0]
    assert RESNET18_ROW in section and "vgg16" not in section and "old run" not in section
    csv = pd.read_csv(tmp_path / "out" / "complexity.csv")
    assert (
        csv.iloc[0]["train_flops_per_sample"] == 10.65e9
        and csv.iloc[0]["device_memory_bytes"] == 16 * 2**30
    )


def test_complexity_of_other_models_only_lists_them_all_and_says_so(store, tmp_path):
    # vgg16 fwd MACs 30.97e9 / 2 = 15.485e9, stored as 15.48499...e9: "15.48"
    log_complexity(
        "laptop",
        CPU,
        [VGG16, complexity_row("mobilenet_v2", 3_504_872, 0.64e9, 1.78e9, 78.2e6, 219)],
        source="available RAM",
    )
    res = analyse(tmp_path, ["--env-label", "l4,laptop"])
    assert sorted(res.analysis.complexity["model"]) == ["mobilenet_v2", "vgg16"]
    assert any(
        n.startswith("no complexity run measured the analysed models (resnet18)")
        for n in res.analysis.notes
    )
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        "| laptop | Test CPU 9000 | vgg16 | 224 px | fp32 | 1000 | 138.4 M | 30.97 | 15.48 | 92.65 | 73.4 MB | 211 "
        "| 17.2 GB (available RAM) |" in md
    )


def test_without_complexity_runs_the_report_says_how_to_get_them(store, tmp_path):
    analyse(tmp_path)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Model complexity\n\nNo `complexity` run in these experiments" in md
    assert not (tmp_path / "out" / "complexity.csv").exists()


def test_hierarchical_roofline_from_logged_runs_only(tracking, tmp_path, monkeypatch):
    """peaks run: fp32 20 TFLOP/s, DRAM 250 GB/s, L2 1 TB/s, L1 5 TB/s; profile run: 4e12 FLOPs over
    1e10 DRAM, 4e11 L2 and 1e12 L1 bytes -> intensities 400, 10 and 4 FLOP/B; train run: 0.8e12
    FLOPs per step / 0.1 s = 8e12 FLOP/s.
    DRAM: min(400 x 250e9, 20e12) = 20e12 (compute-bound, ridge 80); L2: 10 x 1e12 = 10e12;
    L1: min(4 x 5e12, 20e12) = 20e12 -> the hierarchical limiter is L2; efficiency 8e12 / 20e12."""
    gpu = "Test GPU 1"
    log_train(
        "lab", gpu, 64, "fp32", thr=640, thr_sd=5, flops_step=0.8e12, median_s=0.1, intensity=60
    )
    p = params(64, "fp32")
    with RunSession(
        "profile",
        experiment=EXP,
        tags={**env_tags("lab", gpu), schema.TAG_CONFIG_KEY: schema.config_key(p)},
    ) as s:
        s.log_params(p)
        s.log_metrics(
            {
                "ncu_flops_total": 4e12,
                "ncu_dram_bytes": 1e10,
                "ncu_l2_bytes": 4e11,
                "ncu_l1_bytes": 1e12,
            }
        )
    log_peaks(
        "lab",
        gpu,
        {
            "peak_flops_per_s_fp32": 20e12,
            "peak_dram_bytes_per_s": 250e9,
            "peak_l2_bytes_per_s": 1e12,
            "peak_l1_bytes_per_s": 5e12,
        },
    )
    figures, save = {}, plots.save

    def keep(fig, path):  # the figures drawn in this process (--jobs 1), for their Line2D objects
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "save", keep)
    res = analyse(tmp_path, ["--jobs", "1"], vendor_lookup=lambda _: None)

    pt = res.analysis.points.iloc[0]
    assert pt["intensity_source"] == "measured" and pt["intensity_flops_per_byte"] == pytest.approx(
        400
    )
    assert pt["intensity_l2_flops_per_byte"] == pytest.approx(10) and pt[
        "intensity_l1_flops_per_byte"
    ] == pytest.approx(4)
    assert (
        pt["bound"] == "compute-bound"
        and pt["hier_limiter"] == "l2"
        and pt["fraction_of_roof"] == pytest.approx(0.4)
    )
    csv = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert csv.iloc[0]["hier_limiter"] == "l2" and csv.iloc[0][
        "intensity_l2_flops_per_byte"
    ] == pytest.approx(10)
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        "| 400 | measured | fp32 20 TFLOP/s (measured) | compute-bound (hierarchical: l2) | 40.0% |"
        in md
    )
    assert "| lab | Test GPU 1 | L2 bandwidth | 1 TB/s | measured: peaks run" in md

    lines = {
        ln.get_gid(): ln for ln in figures["roofline_lab.png"].axes[0].get_lines() if ln.get_gid()
    }
    for level, bw in (("l2", 1e12), ("l1", 5e12), ("dram", 250e9)):
        ceiling = lines[f"roof|bytes:{level}"]
        assert ceiling.get_ydata()[0] / ceiling.get_xdata()[0] == pytest.approx(bw)
    assert list(lines["points:l2"].get_xdata()) == [pytest.approx(10)]
    assert list(lines["points:l1"].get_xdata()) == [pytest.approx(4)]
    assert list(lines["points:l2"].get_ydata()) == [pytest.approx(8e12)]
    assert "per L2/L1 byte" in figures["roofline_lab.png"].axes[0].get_xlabel()
    legend = [t.get_text() for t in figures["roofline_lab.png"].axes[0].get_legend().get_texts()]
    assert (
        "L2 bandwidth ceiling\n(source in its label)" in legend
        and "same point at its L2\nintensity (hierarchical)" in legend
    )


def test_vendor_table_is_the_roof_without_a_peaks_run(tracking):
    log_train(
        "l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1, intensity=60
    )
    p = joined().points.iloc[0]
    # vendor ridge 30.3e12 / 300e9 = 101 > 60: memory-bound, attainable 60 * 300e9 = 18e12
    assert p["roof_source"] == "vendor" and p["bound"] == "memory-bound"
    assert p["fraction_of_roof"] == pytest.approx(1.5e13 / 18e12)


def test_one_environment_gets_its_roofline_and_the_combined_one(tracking, tmp_path):
    log_train(
        "l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1, intensity=60
    )
    analyse(tmp_path)
    pngs = sorted(p.name for p in (tmp_path / "out" / "figures").glob("roofline*.png"))
    assert pngs == ["roofline_all.png", "roofline_l4.png"]
    assert "`figures/roofline_all.png`" in (tmp_path / "out" / "report.md").read_text()


def test_device_unknown_to_the_real_vendor_table_has_no_roof_and_the_report_says_so(
    tracking, tmp_path, monkeypatch
):
    monkeypatch.delenv(vendor.PEAKS_FILE_ENV, raising=False)
    log_train(
        "laptop", CPU, 32, "fp32", thr=20, thr_sd=1, flops_step=0.8e12, median_s=1.6, intensity=50
    )
    res = analyse(tmp_path, vendor_lookup="auto")  # roofline.vendor, which has no "Test CPU 9000"
    p = res.analysis.points.iloc[0]
    assert (
        math.isnan(p["fraction_of_roof"])
        and p["bound"] == ""
        and res.analysis.roofs[("laptop", CPU)]["roof"] is None
    )
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"no peaks for {CPU} (env laptop): no peaks run and no vendor entry" in md


def test_peaks_file_gives_the_roof(tracking, tmp_path):
    log_train(
        "laptop", CPU, 32, "fp32", thr=20, thr_sd=1, flops_step=0.8e12, median_s=1.6, intensity=50
    )
    pf = (
        tmp_path / "peaks.yaml"
    )  # roofline.vendor's format (docs/peaks.md): all four fields for a new device
    pf.write_text(
        f'devices:\n  - device_name: "{CPU}"\n    flops_per_s: {{fp32: 1.0e+12}}\n'
        "    dram_bytes_per_s: 50e9\n    source: spec sheet\n"
    )
    a = joined(["--peaks-file", str(pf)], vendor_lookup="auto")
    p = a.points.iloc[0]
    # ridge 1e12 / 50e9 = 20 <= 50: compute-bound; achieved 0.8e12 / 1.6 = 5e11 -> 50 %
    assert p["roof_source"] == "vendor" and p["bound"] == "compute-bound"
    assert a.roofs[("laptop", CPU)]["roof"].sources["flops:fp32"] == "vendor: spec sheet"
    assert p["fraction_of_roof"] == pytest.approx(0.5)


def test_env_label_and_filter_select_train_runs(store):
    log_train(
        "laptop",
        CPU,
        32,
        "fp32",
        thr=10,
        thr_sd=1,
        flops_step=1e11,
        median_s=3.2,
        intensity=20,
        model="vgg16",
    )
    pts = joined(["--env-label", "laptop", "--filter", "params.model = 'vgg16'"]).points
    assert list(pts["model"]) == ["vgg16"] and list(pts["env_label"]) == ["laptop"]
    pts = joined(["--env-label", "l4,laptop", "--filter", "params.batch_size = '32'"]).points
    assert sorted(pts["model"]) == ["resnet18", "resnet18", "vgg16"]
    runs, notes = fetch.fetch_runs(fetch.Query(max_runs=2))
    train_runs = runs[runs["tags.run_kind"] == "train"]
    assert list(train_runs["tags.mlflow.runName"]) == [
        "vgg16-b32-fp32",
        "resnet18-b32-fp32",
    ]  # the latest two
    assert notes == [
        "stopped at --max-runs 2 train runs (latest first); raise it to see older runs"
    ]
    log_peaks(
        "laptop", CPU, {"peak_flops_per_s_fp32": 1e12}
    )  # now 2 peaks runs, still 1 profile run
    runs, notes = fetch.fetch_runs(fetch.Query(max_runs=2))
    assert notes == [
        "stopped at --max-runs 2 train runs (latest first); raise it to see older runs",
        "stopped at --max-runs 2 peaks runs (latest first): older peaks runs were not read; "
        "raise --max-runs to use them",
    ]
    assert sorted(runs["tags.run_kind"]) == ["peaks", "peaks", "profile", "train", "train"]
    runs, notes = fetch.fetch_runs(fetch.Query(max_runs=1))
    assert [n.split(" runs")[0] for n in notes] == [
        "stopped at --max-runs 1 train",
        "stopped at --max-runs 1 profile",
        "stopped at --max-runs 1 peaks",
    ]
    assert (runs["tags.run_kind"] == "peaks").sum() == 1 and (
        runs["tags.run_kind"] == "profile"
    ).sum() == 1


def test_cli_tracks_outputs_as_artifacts_of_an_analysis_run(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("roofline.vendor.load_vendor_lookup", lambda *_: vendor_stub)
    rc = app.cli(["--experiment", EXP, "--out", str(tmp_path / "o")])
    assert rc == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 3 and summary[0].startswith(
        "analysed 5 train, 1 profile, 1 peaks runs (2 environment(s)) -> 4 points"
    )
    runs = mlflow.search_runs(
        experiment_names=[EXP], filter_string="tags.run_kind = 'analysis'", output_format="list"
    )
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    # then its report's link and the link of the view that holds it (common.ui.say_links)
    report = (
        f"/runs/{runs[0].info.run_id}/artifacts/report/report.html?workflowType=machine_learning"
    )
    assert summary[1].startswith("see it with `mlflow ui") and summary[1].endswith(report)
    assert (
        summary[2].startswith("analyses and their reports: http")
        and "viewStateShareKey=analyses" in summary[2]
    )
    client = mlflow.tracking.MlflowClient()
    top = {f.path for f in client.list_artifacts(runs[0].info.run_id, "report")}
    assert {
        "report/report.md",
        "report/report.html",
        "report/summary.csv",
        "report/summary.md",
        "report/figures",
    } <= top
    figs = {f.path for f in client.list_artifacts(runs[0].info.run_id, "report/figures")}
    assert "report/figures/roofline_all.png" in figs
    assert runs[0].data.metrics["n_points"] == 4
    assert runs[0].info.run_name == f"analysis-{EXP}"  # what it read
    note = runs[0].data.tags[schema.TAG_NOTE].splitlines()
    assert note[0] == summary[0].split("; report: ")[0]
    # the headline findings (three, each naming its number), then what it read
    assert note[2] == "Headline findings:" and all(n.startswith("- ") for n in note[3:6])
    # bf16 over fp32 at b64 (1400 / 700 = 2) is no headline: these runs logged no step-time CI
    # (no step_time_ci95_rel, no measured_iters), so no interval, and a speed-up is claimed only
    # when its interval excludes 1 (docs/analysis.md, "Findings"); the measured peak ratio is
    assert note[3] == (
        "- l4 (NVIDIA L4), resnet18/b32/fp32: no bf16 run of this config; the device's measured "
        "bf16/fp32 peak ratio is ×4 (80 TFLOP/s vs 20 TFLOP/s, peaks run "
        f"{note[3].split('peaks run ')[1][:8]}): the most bf16 could give compute-bound work."
    )
    assert not any("instead of" in n for n in note[3:6])
    assert note[7].startswith(f"Read: experiments {EXP}; env labels all; filter none")
    assert "report/findings.json" in top


def test_no_matching_runs_is_one_line_and_nonzero(tracking, tmp_path, capsys):
    rc = app.cli(["--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()  # progress lines, then the error
    assert rc == 2
    assert [ln for ln in err if ln.startswith("error")] == err[-1:]
    assert err[-1].startswith("error: no train runs match (all experiments)")
    # issue 32: said before the analysis run is created, so no FAILED analysis run is left
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []


def test_unknown_experiment_and_bad_filter_are_usage_errors(store, tmp_path, capsys):
    assert app.cli(["--no-track", "--experiment", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "no experiment named 'nope'" in capsys.readouterr().err
    assert (
        app.cli(["--no-track", "--filter", "params.model ~ 1", "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: MLflow rejected the filter \"params.model ~ 1\": Expected a quoted string value for parameter (e.g. 'my-value'). Got value 1"
    ]


def test_only_failed_runs_writes_report_and_fails(tracking, tmp_path, capsys):
    log_failed("l4", L4, "CUDA out of memory")
    rc = app.cli(["--no-track", "--out", str(tmp_path / "o")])
    assert rc == 1
    assert "no FINISHED train runs among the matches (1 failed)" in capsys.readouterr().err
    assert "CUDA out of memory" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.server
def test_analysis_over_http_against_a_real_mlflow_server(on_server, tmp_path, monkeypatch):
    """The same pipeline with MLFLOW_TRACKING_URI=http://...: searches, metric histories and artifact
    downloads (complexity/models.csv) through the server, and the analysis run's artifacts uploaded
    through its artifact proxy. Uses the session's shared server, so a fresh experiment name."""
    exp = f"analysis-http-{uuid.uuid4().hex[:8]}"
    # b64 fp32: achieved 1.5e12 / 0.1 = 1.5e13, profiled 2e12 / 1e10 = 200 FLOP/B; b64 bf16: 1e12 / 0.05 = 2e13
    fp32 = log_train(
        "l4",
        L4,
        64,
        "fp32",
        thr=700,
        thr_sd=20,
        flops_step=1.5e12,
        median_s=0.1,
        intensity=60,
        exp=exp,
        steps=[0.1, 0.11, 0.09, 0.1],
    )
    log_train(
        "l4",
        L4,
        64,
        "bf16",
        thr=1400,
        thr_sd=30,
        flops_step=1.0e12,
        median_s=0.05,
        intensity=100,
        exp=exp,
    )
    log_profile(L4, 64, "fp32", flops=2e12, dram_bytes=1e10, exp=exp)
    log_peaks(
        "l4",
        L4,
        {
            "peak_flops_per_s_fp32": 20e12,
            "peak_flops_per_s_bf16": 80e12,
            "peak_dram_bytes_per_s": 250e9,
        },
        exp=exp,
    )
    log_complexity("l4", L4, [RESNET18], exp=exp)
    monkeypatch.setattr("roofline.vendor.load_vendor_lookup", lambda *_: vendor_stub)
    out = tmp_path / "report"
    assert app.main(["--experiment", exp, "--out", str(out), "--jobs", "1"]) == 0

    csv = pd.read_csv(out / "summary.csv").set_index("precision")
    # fp32: 200 FLOP/B >= ridge 20e12 / 250e9 = 80: compute-bound, 1.5e13 / 20e12 = 75 %
    assert (
        csv.loc["fp32", "intensity_source"] == "measured"
        and csv.loc["fp32", "bound"] == "compute-bound"
    )
    assert csv.loc["fp32", "fraction_of_roof"] == pytest.approx(0.75)
    # bf16: modeled 100 < ridge 80e12 / 250e9 = 320: memory-bound, 2e13 / (100 x 250e9) = 80 %
    assert csv.loc["bf16", "bound"] == "memory-bound" and csv.loc[
        "bf16", "fraction_of_roof"
    ] == pytest.approx(0.8)
    md = (out / "report.md").read_text()
    assert RESNET18_ROW in md  # complexity/models.csv came through the artifact proxy
    # 1400 / 700; these runs logged no step-time CI: no interval, never a first-order ± of SDs
    no_ci = "| l4 | NVIDIA L4 | resnet18 | 64 | 1000 | bf16 | 2.00× (no CI: a point lacks its step-time CI) |"
    assert no_ci in md
    assert fetch.fetch_series([fp32]) == {
        fp32: [0.1, 0.11, 0.09, 0.1]
    }  # the variability figure's input
    assert mpimg.imread(out / "figures" / "step_time_variability.png").ndim == 3
    done = mlflow.search_runs(
        experiment_names=[exp], filter_string="tags.run_kind = 'analysis'", output_format="list"
    )
    assert (
        len(done) == 1
        and done[0].info.status == "FINISHED"
        and done[0].data.metrics["n_points"] == 2
    )
    listed = {
        f.path for f in mlflow.tracking.MlflowClient().list_artifacts(done[0].info.run_id, "report")
    }
    assert {
        "report/report.md",
        "report/summary.csv",
        "report/complexity.csv",
        "report/figures",
    } <= listed
    assert RESNET18_ROW in mlflow.artifacts.load_text(
        f"runs:/{done[0].info.run_id}/report/report.md"
    )


@pytest.mark.parametrize("argv", [["--filter", "params.model ~ 1"], ["--filter", "tags.x = 'a"]])
def test_a_malformed_filter_leaves_no_failed_analysis_run(store, tmp_path, capsys, argv):
    """Issue 15: every malformed --filter left a FAILED analysis run behind."""
    before = len(mlflow.search_runs(search_all_experiments=True, output_format="list"))
    assert app.cli([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('error: MLflow rejected the filter "')
    assert len(mlflow.search_runs(search_all_experiments=True, output_format="list")) == before


@pytest.mark.parametrize("kind", ["file", "under a file", "unwritable"])
def test_an_out_that_cannot_hold_the_report_is_one_line_before_fetching(
    store, tmp_path, capsys, monkeypatch, kind
):
    """Issue 15: a file or read-only --out gave a 67- or 76-line traceback after fetching everything."""
    f = tmp_path / "report.txt"
    f.write_text("x")
    # sysfs refuses mkdir to every process, root included (tests run as root: chmod is no test)
    out = {"file": str(f), "under a file": str(f / "sub"), "unwritable": "/sys/roofline-report"}[
        kind
    ]
    if kind == "unwritable" and not os.path.isdir("/sys/class"):
        pytest.skip("no sysfs here")
    fetched = []
    monkeypatch.setattr(fetch, "fetch_runs", lambda *a, **k: fetched.append(a))
    before = len(mlflow.search_runs(search_all_experiments=True, output_format="list"))
    assert app.cli(["--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = {
        "file": f"error: --out {out} is a file: pass a folder for the report (it is created when missing)",
        "under a file": f"error: --out {out}: cannot write there (Not a directory): pass a folder you can write to",
        "unwritable": f"error: --out {out}: cannot write there ({os.strerror(1 if os.geteuid() == 0 else 13)}): pass a folder you can write to",
    }[kind]
    assert err == [expected] and fetched == []
    assert len(mlflow.search_runs(search_all_experiments=True, output_format="list")) == before


def log_tagged_profile(extra_tags: dict) -> None:
    """A profile run of L4 b64 fp32 with `extra_tags`: 3e12 FLOPs over 1e10 DRAM bytes (300)."""
    p = params(64, "fp32")
    tags = {**env_tags("l4", L4), schema.TAG_CONFIG_KEY: schema.config_key(p), **extra_tags}
    with RunSession("profile", experiment=EXP, tags=tags) as s:
        s.log_params(p)
        s.log_metrics({"ncu_flops_total": 3e12, "ncu_dram_bytes": 1e10})


def test_a_truncated_profile_and_an_unplaced_one_read_from_the_store(tracking):
    """The ncu_truncated tag and the profile params reach the join through the fetch (which reads
    only analysis.join.READ_KEYS): the cut profile gives no intensity, the L4 profile of a config
    timed only elsewhere is listed with the train line that would place it."""
    log_train(
        "l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1, intensity=60
    )
    log_tagged_profile({"ncu_truncated": "cut"})
    log_profile(L4, 32, "bf16", flops=3e12, dram_bytes=1.5e10)
    a = joined()
    assert a.points.iloc[0]["intensity_source"] == "modeled"
    notes = " | ".join(a.notes)
    assert "1 profile run(s) were imported from a truncated ncu file" in notes
    assert (
        "(resnet18/b32/bf16 on NVIDIA L4, env l4) placed no point: no finished train run of that "
        "config on that device; time it there (python -m train --model resnet18 --batch 32 "
        "--precision bf16 --image-size 224 --num-classes 1000 --optimizer sgd --env-label l4)"
    ) in notes


def test_a_profile_that_missed_a_phase_is_used_only_when_asked(tracking):
    """Issue 22, item 3: the ncu_missing_phase tag of a forward-only capture reaches the join
    through the fetch; its forward-pass intensity (300) stays off the b64 point unless
    --use-incomplete-profiles asks."""
    log_train(
        "l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1, intensity=60
    )
    log_tagged_profile({"ncu_missing_phase": "backward"})
    point = joined().points.iloc[0]
    assert point["intensity_source"] == "modeled" and point["intensity_flops_per_byte"] == 60
    point = joined(["--use-incomplete-profiles"]).points.iloc[0]
    assert point["intensity_source"] == "measured" and point["intensity_flops_per_byte"] == 300
    assert joined(["--use-incomplete-profiles", "false"]).points.iloc[0]["intensity_source"] == (
        "modeled"
    )
