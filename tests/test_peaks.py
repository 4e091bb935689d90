"""profiling.peaks, what a run says: results (metrics, spread, bimodal samples, vendor fractions,
the summary line) and the `python -m profiling.peaks` CLI with its `peaks` run."""

from __future__ import annotations

import json
import math

import mlflow
import pytest

from common import envinfo, schema
from common.fmt import si
from profiling.peaks import __main__ as cli
from profiling.peaks import facts, gemm, measure, results, sampling, sizing, stream
from profiling.peaks.config import PeaksConfig
from profiling.peaks.dtypes import dtype_availability, select_dtypes
from tests.conftest import gpu_available


# ------------------------------------------------------------------------------ results
def test_result_metrics_pick_the_better_stream_kernel():
    r = results.PeaksResult("cpu", 64, 4000)
    r.compute["fp32"] = sampling.Measurement("fp32", "flops", 100.0, 1, [1.0, 2.0, 4.0])
    r.stream["copy"] = sampling.Measurement("copy", "bytes", 10.0, 1, [1.0, 1.0])
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 30.0, 1, [1.0, 2.0, 3.0])
    m = r.metrics()
    assert m["peak_flops_per_s_fp32"] == 100.0 and m["peak_flops_per_s_fp32_p10"] == 30.0
    assert m["peak_flops_per_s_fp32_near_best_fraction"] == 1 / 3  # rates 100, 50, 25
    assert r.dram_kernel == "triad"
    assert m["peak_dram_bytes_per_s"] == 30.0 and m["peak_dram_bytes_per_s_p10"] == 11.0
    assert m["peak_dram_bytes_per_s_near_best_fraction"] == 1 / 3  # rates 30, 15, 10
    assert not any(k.endswith("_median") for k in m)
    # per kernel only the best; the spread of every kernel is in samples.json
    assert "peak_dram_copy_bytes_per_s_p10" not in m
    assert r.to_dict()["stream"]["triad"]["p10_per_s"] == 11.0
    assert m["peak_dram_copy_bytes_per_s"] == 10.0
    assert (
        m["samples_gemm_fp32"] == 3 and m["samples_dram_copy"] == 2 and m["samples_dram_triad"] == 3
    )
    assert "peak_l2_bytes_per_s" not in m and r.l2_kernel is None
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 200.0, 4, [1.0, 2.0], requested=5
    )  # 800, 400 B/s
    r.l2["triad"] = sampling.Measurement(
        "triad", "bytes", 300.0, 1, [1.0, 1.0], requested=5
    )  # 300 B/s
    r.cpu_probe_ratios = {"fp16": 0.5, "bf16": 3.0}
    m = r.metrics()
    assert (
        r.l2_kernel == "copy"
        and m["peak_l2_bytes_per_s"] == 800.0
        and m["peak_l2_bytes_per_s_p10"] == 440.0  # rates 800, 400: 400 + 0.1 x 400
        and m["peak_l2_bytes_per_s_near_best_fraction"] == 0.5
    )
    assert m["peak_l2_triad_bytes_per_s"] == 300.0 and m["samples_l2_copy"] == 2
    assert m["cpu_fp16_probe_ratio"] == 0.5 and m["cpu_bf16_probe_ratio"] == 3.0
    assert r.budget_cuts() == {"l2 copy": (2, 5), "l2 triad": (2, 5)}
    assert r.to_dict()["budget_cuts"]["l2 copy"] == {"taken": 2, "asked": 5}
    assert r.l2_withheld is None and r.to_dict()["l2_withheld"] is None
    for key in m:
        schema.check_key(key)


def test_an_l2_figure_below_dram_is_withheld():
    r = results.PeaksResult("cpu", 64, 4000)
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 30.0, 1, [1.0])  # DRAM 30 B/s
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 20.0, 1, [1.0]
    )  # "L2" 20 B/s: disturbed samples
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 12.0, 1, [1.0])
    m = r.metrics()
    assert "below the DRAM figure" in r.l2_withheld and "peak_l2_bytes_per_s" not in m
    assert "peak_l2_bytes_per_s_p10" not in m and "peak_l2_bytes_per_s_near_best_fraction" not in m
    assert m["peak_l2_copy_bytes_per_s"] == 20.0  # the raw figures stay
    r.l2["copy"] = sampling.Measurement("copy", "bytes", 31.0, 1, [1.0])
    assert r.l2_withheld is None and r.metrics()["peak_l2_bytes_per_s"] == 31.0


def test_format_rate_is_si():
    assert si(1.234e11, "FLOP/s") == "123 GFLOP/s"
    assert si(3.35e12, "B/s") == "3.35 TB/s"
    assert si(12.0, "B/s") == "12 B/s"


# ------------------------------------------------------------------------------ the CLI
TINY = [
    "--device",
    "cpu",
    "--matrix-size",
    "64",
    "--bandwidth-mib",
    "1",
    "--repeats",
    "2",
    "--bandwidth-repeats",
    "3",
]


@pytest.mark.skipif(gpu_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_is_a_one_line_error(capsys, tracking):
    assert cli.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --device cuda: CUDA is not available") and "\n" not in err
    assert mlflow.search_runs(search_all_experiments=True).empty  # nothing measured, no run


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--dtypes", "fp32,fp8"], "dtypes must be among"),
        (["--dtypes", "tf32"], "--dtypes tf32: tf32 is a CUDA tensor-core mode"),
        (["--repeats", "0"], "repeats must be a positive integer"),
        (["--device", "tpu"], "device must be auto, cpu, cuda, cuda:N or mps"),
        (["--bandwidth-mib", "10000000"], "the STREAM arrays need 29296.9 GiB"),  # 3 x 9.5 TiB
        (["--env-label", "x" * 243], "env_label 'xxxx"),  # one rule: common.schema.env_label
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, tracking, argv, message):
    assert cli.main(TINY + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_mps_without_mps_is_a_one_line_error(capsys, tracking):
    import torch

    if torch.backends.mps.is_available():
        pytest.skip("checks the message on a machine without MPS")
    assert cli.main(["--device", "mps"]) == 2
    assert capsys.readouterr().err.startswith("error: --device mps: MPS is not available")


def test_tiny_measurement_logs_a_peaks_run(capsys, tracking):
    argv = TINY + [
        "--dtypes",
        "fp32,bf16",
        "--env-label",
        "test-env",
        "--experiment",
        "peaks-test",
        "--time-budget-s",
        "600",
    ]
    l2 = sizing.l2_array_bytes(facts.device_facts("cpu").l2_bytes)
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    out, err = captured.out.strip().splitlines(), captured.err
    assert (
        len(out) == 3 and out[0].startswith("peaks cpu [") and "fp32" in out[0] and "DRAM" in out[0]
    )
    assert out[1].startswith("see it with `mlflow ui") and "viewStateShareKey=peaks" in out[2]

    (run,) = mlflow.search_runs(experiment_names=["peaks-test"], output_format="list")
    assert run.info.status == "FINISHED" and run.info.run_id in out[0]
    tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
    assert tags[schema.TAG_RUN_KIND] == "peaks"
    assert tags[schema.TAG_ENV_LABEL] == "test-env"
    # the summary line, without the command's total time and the run id (not known before it ends)
    assert out[0].startswith(tags[schema.TAG_NOTE] + " (") and "s in all); run " in out[0]
    assert tags[schema.TAG_DEVICE_NAME] == envinfo.device_name("cpu")
    assert tags[schema.TAG_DEVICE_TYPE] == "cpu" and "torch_version" in tags
    assert tags["dtypes_measured"] == "fp32,bf16" and "tf32" in tags["dtypes_skipped"]
    for dtype in ("fp32", "bf16"):
        best, p10 = metrics[f"peak_flops_per_s_{dtype}"], metrics[f"peak_flops_per_s_{dtype}_p10"]
        assert math.isfinite(best) and 0 < p10 <= best
        assert 0 < metrics[f"peak_flops_per_s_{dtype}_near_best_fraction"] <= 1
    assert "peak_flops_per_s_fp16" not in metrics
    kernel = tags["peak_dram_kernel"]
    # 1 MiB "DRAM" arrays are cache-resident, so the L2 figure may come out below them and be withheld
    withheld = "peak_l2_withheld" in tags
    for level in ("dram", "l2") if l2 else ("dram",):
        for key in (f"peak_{level}_copy_bytes_per_s", f"peak_{level}_triad_bytes_per_s"):
            assert math.isfinite(metrics[key]) and metrics[key] > 0, key
        if level == "l2" and withheld:
            assert (
                "peak_l2_bytes_per_s" not in metrics
                and "below the DRAM figure" in tags["peak_l2_withheld"]
            )
            assert (
                max(metrics["peak_l2_copy_bytes_per_s"], metrics["peak_l2_triad_bytes_per_s"])
                < metrics["peak_dram_bytes_per_s"]
            )
            continue
        for key in (f"peak_{level}_bytes_per_s", f"peak_{level}_bytes_per_s_p10"):
            assert math.isfinite(metrics[key]) and metrics[key] > 0, key
        assert 0 < metrics[f"peak_{level}_bytes_per_s_p10"] <= metrics[f"peak_{level}_bytes_per_s"]
        assert 0 < metrics[f"peak_{level}_bytes_per_s_near_best_fraction"] <= 1
        assert metrics[f"peak_{level}_bytes_per_s"] == max(
            metrics[f"peak_{level}_copy_bytes_per_s"], metrics[f"peak_{level}_triad_bytes_per_s"]
        )
    assert metrics["peak_dram_bytes_per_s"] == metrics[f"peak_dram_{kernel}_bytes_per_s"]
    assert params["matrix_size_resolved"] == "64" and params["stream_array_bytes"] == str(2**20)
    assert (
        params["dtypes"] == "fp32,bf16"
        and params["repeats"] == "2"
        and params["time_budget_s"] == "600.0"
    )
    assert params["l2_array_bytes"] == str(l2) and params["l2_copies_per_launch"] == "1"
    if l2:
        if not withheld:
            assert (
                metrics["peak_l2_bytes_per_s"]
                == metrics[f"peak_l2_{tags['peak_l2_kernel']}_bytes_per_s"]
            )
        assert (
            metrics["samples_l2_copy"]
            == metrics["samples_l2_triad"]
            == 3 * measure.L2_REPEATS_FACTOR
        )
    # the budget is generous: every asked-for sample was taken, and the run says so
    assert tags["time_budget_cut"] == "none" and "within the 600 s time budget" in out[0]
    assert (
        metrics["samples_gemm_fp32"] == 2
        and metrics["samples_dram_copy"] == metrics["samples_dram_triad"] == 3
    )
    assert metrics["setup_s"] == pytest.approx(
        sum(v for k, v in metrics.items() if k.startswith("setup_") and k != "setup_s")
    )
    assert {"setup_device_s", "setup_probes_s", "setup_environment_s", "setup_tracking_s"} <= set(
        metrics
    )
    assert (
        "setup_startup_s" not in metrics
    )  # main(argv) from a test: the process start says nothing
    assert "note: time: device facts" in err and "measuring" in err

    client = mlflow.tracking.MlflowClient()
    local = client.download_artifacts(run.info.run_id, "peaks/samples.json")
    samples = json.loads(open(local).read())
    assert len(samples["compute"]["fp32"]["samples_s"]) == 2
    assert samples["compute"]["fp32"]["flops_per_call"] == 2 * 64**3
    assert len(samples["stream"]["triad"]["samples_s"]) == 3
    assert samples["stream"]["copy"]["bytes_per_call"] == 2 * 2**20  # 2 arrays of 1 MiB
    assert samples["stream"]["copy"]["samples_requested"] == 3 and samples["budget_cuts"] == {}


def _no_measuring_probe(monkeypatch, ratios):
    calls = []

    def probe(*args, **kwargs):
        calls.append(args)
        return dict(ratios)

    monkeypatch.setattr(gemm, "probe_cpu_ratios", probe)
    return calls


@pytest.mark.parametrize(
    "ratios,measured,skipped",
    [
        ({"fp16": 1.0, "bf16": 3.0}, "fp32,fp16,bf16", None),  # AMX / AVX512-FP16: both fast
        ({"fp16": 0.02, "bf16": 3.0}, "fp32,bf16", "fp16 matmul ran at 2% of the fp32 rate"),
        (
            {"fp16": 0.9, "bf16": 0.05},
            "fp32,fp16",
            "bf16 matmul ran at 5% of the fp32 rate",
        ),  # no AMX/AVX512-BF16
    ],
)
def test_default_dtypes_on_cpu_follow_the_probe(
    monkeypatch, capsys, tracking, ratios, measured, skipped
):
    calls = _no_measuring_probe(monkeypatch, ratios)
    assert cli.main(TINY + ["--experiment", "auto"]) == 0  # no --dtypes: the CPU defaults
    assert len(calls) == 1
    err = capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["auto"], output_format="list")
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["dtypes_measured"] == measured
    assert set(metrics) >= {f"peak_flops_per_s_{d}" for d in measured.split(",")}
    slow = {"fp16", "bf16"} - set(measured.split(","))
    assert not any(f"peak_flops_per_s_{d}" in metrics for d in slow)
    if skipped:
        assert skipped in tags["dtypes_skipped"] and skipped in err
    assert (
        metrics["cpu_fp16_probe_ratio"] == ratios["fp16"]
        and metrics["cpu_bf16_probe_ratio"] == ratios["bf16"]
    )


def test_explicit_dtypes_skip_the_probe(monkeypatch, capsys, tracking):
    calls = _no_measuring_probe(monkeypatch, {"fp16": 0.01, "bf16": 0.01})
    assert cli.main(TINY + ["--dtypes", "bf16", "--experiment", "explicit"]) == 0
    assert calls == []  # asked for: measured however slow, and nothing probed
    (run,) = mlflow.search_runs(experiment_names=["explicit"], output_format="list")
    assert (
        run.data.tags["dtypes_measured"] == "bf16"
        and "cpu_bf16_probe_ratio" not in run.data.metrics
    )


def test_time_budget_cuts_sampling_and_says_so(capsys, tracking):
    argv = TINY + [
        "--dtypes",
        "fp32",
        "--repeats",
        "5",
        "--time-budget-s",
        "0.001",
        "--experiment",
        "budget",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # one sample lasts >= 50 ms, so the 1 ms budget is gone after the first round of every step
    assert (
        "the 0.001 s time budget cut sampling (gemm fp32 1/5, dram copy 1/3, dram triad 1/3" in out
    )
    (run,) = mlflow.search_runs(experiment_names=["budget"], output_format="list")
    m, tags = run.data.metrics, run.data.tags
    assert (
        m["samples_gemm_fp32"] == 1 and m["samples_dram_copy"] == 1 and m["samples_dram_triad"] == 1
    )
    assert tags["time_budget_cut"].startswith("gemm fp32 1/5, dram copy 1/3, dram triad 1/3")
    assert math.isfinite(m["peak_flops_per_s_fp32"]) and math.isfinite(m["peak_dram_bytes_per_s"])


def test_automatic_dram_array_size(monkeypatch, capsys, tracking):
    monkeypatch.setattr(sizing, "DRAM_MIN_ARRAY_BYTES", 2**20)  # keep the arrays tiny
    hw = facts.DeviceFacts(None, True, llc_bytes=2**20, free_bytes=48 * 2**20, l2_bytes=None)
    monkeypatch.setattr(facts, "device_facts", lambda device: hw)
    base = [a for a in TINY if a not in ("--bandwidth-mib", "1")] + ["--dtypes", "fp32"]
    assert (
        cli.main(base + ["--experiment", "auto-size"]) == 0
    )  # 4 x 1 MiB LLC = 4 MiB, cap 8 MiB: no warning
    err = capsys.readouterr().err
    assert "capped" not in err and "no L2 ceiling measured" in err
    (run,) = mlflow.search_runs(experiment_names=["auto-size"], output_format="list")
    assert run.data.params["bandwidth_mib"] == "0" and run.data.params["stream_array_bytes"] == str(
        4 * 2**20
    )
    assert (
        "peak_l2_bytes_per_s" not in run.data.metrics and run.data.params["l2_array_bytes"] == "0"
    )

    monkeypatch.setattr(
        facts, "device_facts", lambda device: facts.DeviceFacts(None, True, 2**20, 12 * 2**20)
    )
    assert (
        cli.main(base + ["--experiment", "capped"]) == 0
    )  # cap: half of 12 MiB for three arrays = 2 MiB each
    assert "warning: STREAM arrays capped at 2 MiB each instead of 4 MiB" in capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["capped"], output_format="list")
    assert run.data.params["stream_array_bytes"] == str(2 * 2**20)


def test_vendor_entry_is_logged_when_the_device_is_in_the_table(tmp_path, capsys, tracking):
    name = envinfo.device_name("cpu")
    peaks_file = tmp_path / "peaks.json"
    peaks_file.write_text(
        json.dumps(
            [
                {
                    "device_name": name,
                    "flops_per_s": {"fp32": 1e12},
                    "dram_bytes_per_s": 100e9,
                    "source": "https://example.com/cpu",
                }
            ]
        )
    )
    assert (
        cli.main(TINY + ["--dtypes", "fp32", "--peaks-file", str(peaks_file), "--experiment", "v"])
        == 0
    )
    assert "of datasheet" in capsys.readouterr().out
    (run,) = mlflow.search_runs(experiment_names=["v"], output_format="list")
    assert (
        run.data.tags["vendor_peaks"] == name
        and run.data.tags["vendor_source"] == "https://example.com/cpu"
    )
    assert float(run.data.params["vendor_peak_flops_per_s_fp32"]) == 1e12
    assert float(run.data.params["vendor_peak_dram_bytes_per_s"]) == 100e9
    m = run.data.metrics
    assert m["fraction_of_vendor_flops_fp32"] == pytest.approx(m["peak_flops_per_s_fp32"] / 1e12)
    assert m["fraction_of_vendor_dram"] == pytest.approx(m["peak_dram_bytes_per_s"] / 100e9)
    assert "vendor_peak_l2_bytes_per_s" not in run.data.params and "fraction_of_vendor_l2" not in m


def test_vendor_cache_bandwidths_are_compared_when_given():
    from roofline.vendor import VendorPeaks

    # rates a device can have (VendorPeaks refuses a peak below 1e6 per second)

    r = results.PeaksResult("cuda", 64, 4000)
    r.compute["bf16"] = sampling.Measurement("bf16", "flops", 100e9, 1, [1.0])
    r.stream["copy"] = sampling.Measurement("copy", "bytes", 50e9, 1, [1.0])
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 300e9, 1, [1.0])
    vendor = VendorPeaks(
        "X", {"bf16": 400e9}, 100e9, "https://x", l2_bytes_per_s=600e9, l1_bytes_per_s=900e9
    )
    params, tags, metrics = results.vendor_fields(vendor, r)
    assert (
        params["vendor_peak_l2_bytes_per_s"] == 600e9
        and params["vendor_peak_l1_bytes_per_s"] == 900e9
    )
    assert metrics == {
        "fraction_of_vendor_flops_bf16": 0.25,
        "fraction_of_vendor_dram": 0.5,
        "fraction_of_vendor_l2": 0.5,
    }


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes",
        "DefaultCPUAllocator: not enough memory: you tried to allocate 6442450944 bytes",  # Windows
    ],
)
def test_out_of_memory_ends_the_run_failed(monkeypatch, capsys, tracking, message):
    def boom(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(measure, "run_peaks", boom)
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "oom"]) == 1
    first = measure.plan(
        ["fp32"], l2=sizing.l2_array_bytes(facts.device_facts("cpu").l2_bytes) > 0
    )[0]
    assert f"error: out of memory during {first}: use a smaller" in capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["oom"], output_format="list")
    assert run.info.status == "FAILED" and "smaller --matrix-size" in run.data.tags["error"]


def test_other_runtime_errors_are_not_called_out_of_memory(monkeypatch, tracking):
    def boom(*args, **kwargs):
        raise RuntimeError("an unrelated bug")

    monkeypatch.setattr(measure, "run_peaks", boom)
    with pytest.raises(RuntimeError, match="unrelated bug"):  # a bug shows its traceback
        cli.main(TINY + ["--dtypes", "fp32", "--experiment", "bug"])


def test_a_disturbed_l2_figure_is_reported_but_not_logged_as_the_l2_roof(
    monkeypatch, capsys, tracking
):
    def disturbed(device, dtypes, n, array_bytes, repeats, bandwidth_repeats, **kwargs):
        r = results.PeaksResult("cpu", n, array_bytes, 4096)
        r.compute["fp32"] = sampling.Measurement("fp32", "flops", 1e9, 1, [0.01])
        r.stream["triad"] = sampling.Measurement("triad", "bytes", 1e8, 1, [0.01])  # 10 GB/s
        r.l2["copy"] = sampling.Measurement(
            "copy", "bytes", 2e6, 1, [0.01]
        )  # 200 MB/s: a descheduled thread
        r.l2["triad"] = sampling.Measurement("triad", "bytes", 3e6, 1, [0.01])  # 300 MB/s
        return r

    monkeypatch.setattr(measure, "run_peaks", disturbed)
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "disturbed"]) == 0
    captured = capsys.readouterr()
    assert "warning: the L2 figure (300 MB/s) is below the DRAM figure (10 GB/s)" in captured.err
    assert "L2 300 MB/s (triad) (below DRAM: disturbed, not reported as peak_l2)" in captured.out
    (run,) = mlflow.search_runs(experiment_names=["disturbed"], output_format="list")
    assert (
        "peak_l2_bytes_per_s" not in run.data.metrics
        and run.data.metrics["peak_l2_triad_bytes_per_s"] == 3e8
    )
    assert "below the DRAM figure" in run.data.tags["peak_l2_withheld"]
    assert run.data.tags["samples_bimodal"] == "none" and "bimodal" not in captured.out


def _loaded_machine_result(n=64, array_bytes=2**20) -> results.PeaksResult:
    """Issue 12's run: L2 samples bimodal on a loaded machine, 4 of 30 clean (46-50 GB/s), 26 taken
    while another process held a core (40-67 MB/s): their median was 3 orders below the best."""
    r = results.PeaksResult("cpu", n, array_bytes, 4096)
    r.compute["fp32"] = sampling.Measurement("fp32", "flops", 1e9, 1, [0.010, 0.0102, 0.0105])
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 1e8, 1, [0.01, 0.0101, 0.0103])
    clean = [2.0e-3, 2.05e-3, 2.1e-3, 2.15e-3]  # 1e8 bytes in 2 ms: 50 GB/s
    disturbed = [1.5 + i / 25 for i in range(26)]  # 1.5 to 2.5 s: 67 to 40 MB/s
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 1e8, 1, disturbed[:13] + clean + disturbed[13:]
    )
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 1.5e8, 1, [0.0125] * 30)  # 12 GB/s
    return r


def test_bimodal_samples_are_said_not_hidden_in_a_median():
    import statistics

    r = _loaded_machine_result()
    copy = r.l2["copy"]
    assert r.l2_kernel == "copy" and copy.best == pytest.approx(50e9)
    assert statistics.median(copy.rates) < copy.best / 500  # what `_median` used to log
    m = r.metrics()
    assert m["peak_l2_bytes_per_s"] == copy.best  # the ceiling stays the best sample
    assert m["peak_l2_bytes_per_s_near_best_fraction"] == 4 / 30
    assert 40e6 < m["peak_l2_bytes_per_s_p10"] < 50e6  # the disturbed group, named as such
    assert m["peak_dram_bytes_per_s_near_best_fraction"] == 1.0  # 10, 9.9, 9.7 GB/s
    assert list(r.bimodal()) == ["l2 copy"] and not r.l2["triad"].bimodal
    assert copy.spread_text() == "4/30 samples within 10% of the best, 26/30 below 50% of it"
    line = results.summary_line("cpu", "X", r, None, PeaksConfig(env_label="t"), "not tracked")
    assert "L2 50 GB/s (copy) (bimodal: 4/30 samples near the best)" in line
    assert line.count("bimodal") == 1  # fp32 and DRAM samples agree with their best
    assert r.to_dict()["bimodal"] == ["l2 copy"] and r.to_dict()["l2"]["copy"]["bimodal"]


def test_a_peaks_run_with_bimodal_samples_says_so(monkeypatch, capsys, tracking):
    monkeypatch.setattr(measure, "run_peaks", lambda *a, **k: _loaded_machine_result())
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "bimodal"]) == 0
    captured = capsys.readouterr()
    assert (
        "note: l2 copy samples bimodal (best reported): 4/30 samples within 10% of the best, "
        "26/30 below 50% of it" in captured.err
    )
    assert "L2 50 GB/s (copy) (bimodal: 4/30 samples near the best)" in captured.out
    (run,) = mlflow.search_runs(experiment_names=["bimodal"], output_format="list")
    assert run.data.tags["samples_bimodal"] == "l2 copy"
    assert run.data.metrics["peak_l2_bytes_per_s"] == pytest.approx(50e9)
    assert run.data.metrics["peak_l2_bytes_per_s_near_best_fraction"] == pytest.approx(4 / 30)
    assert not any(k.endswith("_median") for k in run.data.metrics)


def test_no_track_measures_without_a_run(capsys, tracking):
    assert cli.main(TINY + ["--dtypes", "fp32", "--track", "false"]) == 0
    assert capsys.readouterr().out.strip().endswith("not tracked")
    assert mlflow.search_runs(search_all_experiments=True).empty


@pytest.mark.gpu
def test_cuda_tiny_measurement(tracking):
    import torch

    cap = torch.cuda.get_device_capability()
    av = dtype_availability("cuda", cap, torch.cuda.is_bf16_supported(including_emulation=False))
    dtypes, _ = select_dtypes(None, av)
    l2 = sizing.l2_array_bytes(facts.device_facts("cuda").l2_bytes)
    r = measure.run_peaks("cuda", dtypes, 256, 2**20, 2, 2, l2_array_bytes=l2, min_sample_s=0.0)
    assert set(r.compute) == set(dtypes) and all(m.best > 0 for m in r.compute.values())
    assert r.metrics()["peak_dram_bytes_per_s"] > 0 and r.metrics()["peak_l2_bytes_per_s"] > 0
    copies = stream.l2_copies_per_launch(l2, "cuda")
    n = l2 // stream.STREAM_ELEMENT_BYTES
    assert copies > 1 and r.l2["copy"].copies_per_call == copies
    assert r.l2["copy"].work == copies * 2 * n * stream.STREAM_ELEMENT_BYTES


@pytest.mark.gpu
def test_cuda_graph_runs_every_copy_in_one_replay():
    import torch

    x = torch.zeros(1, device="cuda")
    replay = stream.cuda_graph(lambda: x.add_(1), 7, "cuda")
    torch.cuda.synchronize()
    assert x.item() == 1  # the warmup call, outside the capture
    replay()
    replay()
    torch.cuda.synchronize()
    assert x.item() == 1 + 2 * 7
