"""`python -m profiling` end to end: a stand-in `ncu` on PATH -> CSV -> parse -> one MLflow profile run.

The stand-in is a small Python script named `ncu` that the test puts first on PATH. It records the
argv it was given, copies a recorded ncu output (a fixture CSV, or a message log such as
ERR_NVGPUCTRPERM) to the `--log-file` it was asked for (or writes none), prints it when told to,
prints a given line to stderr, and exits with the code it was told. It does not run the `python -m train` child. The CUDA check is replaced by a probe
passed to `main` (profiling/cli.py).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from common import schema
from profiling import cli
from profiling.ncu import import_path
from profiling.ncu.capture import NO_GPU_MESSAGE
from profiling.ncu.counting import tensor_inst_caution
from profiling.ncu.gpu import GpuInfo, cuda_probe
from profiling.ncu.messages import NO_KERNELS_MESSAGE, PERM_MESSAGE
from profiling.ncu.names import OPS, op_counter
from train.config import TrainConfig, config_flags

MESSAGES = Path(__file__).resolve().parent / "data" / "ncu_messages"
L4_CSV = "l4_resnet18_bs64_train_step_details_nvtx.csv"
CONFIG = [
    "--model",
    "resnet18",
    "--batch",
    "64",
    "--image-size",
    "32",
    "--env-label",
    "lab-l4",
    "--warmup-iters",
    "2",
]

STANDIN = """#!{python}
import json, os, shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version 0.0.0.0 (stand-in for tests)")
    sys.exit(0)
if args == ["--help"]:
    print(os.environ.get("STANDIN_HELP", "no help"))
    sys.exit(0)
with open(os.environ["STANDIN_ARGV"], "w") as fh:
    json.dump(sys.argv, fh)
if os.environ.get("STANDIN_STDERR"):
    print(os.environ["STANDIN_STDERR"], file=sys.stderr)
log = args[args.index("--log-file") + 1]
if os.environ.get("STANDIN_OUTPUT"):
    shutil.copyfile(os.environ["STANDIN_OUTPUT"], log)
    if os.environ.get("STANDIN_PRINT"):
        print(open(log).read())
sys.exit(int(os.environ.get("STANDIN_RC", "0")))
"""


def gpu(available=True, capability=(8, 9), name="NVIDIA L4"):
    return lambda device, env_label=None: GpuInfo(
        available,
        name if available else None,
        capability if available else None,
        {"driver_version": "555.42"},
    )


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Put the stand-in `ncu` first on PATH; returns a function choosing what it writes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "ncu"
    exe.write_text(STANDIN.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{'/usr/bin:/bin'}")
    argv_file = tmp_path / "standin_argv.json"
    monkeypatch.setenv("STANDIN_ARGV", str(argv_file))

    def configure(output: Path | None, rc: int = 0, echo: bool = False, stderr: str | None = None):
        monkeypatch.setenv(
            "STANDIN_OUTPUT", str(output) if output else ""
        )  # None: write no log file
        monkeypatch.setenv("STANDIN_RC", str(rc))
        if echo:
            monkeypatch.setenv("STANDIN_PRINT", "1")
        if stderr:
            monkeypatch.setenv("STANDIN_STDERR", stderr)
        return argv_file

    return configure


def capture(tmp_path, *flags, probe=None) -> int:
    """`python -m profiling` with CONFIG and `flags` on a stand-in GPU (default: an L4), its ncu log
    under tmp_path, into experiment "prof"; the exit code."""
    return cli.main(
        [*CONFIG, *flags, "--out", str(tmp_path / "o"), "--experiment", "prof"],
        probe=probe or gpu(),
    )


def import_file(path, *flags, probe=None) -> int:
    """`python -m profiling --import path` with CONFIG and `flags`, as measured on an L4, into
    experiment "prof"; the exit code."""
    args = [*CONFIG, *flags, "--import", str(path), "--device-name", "NVIDIA L4"]
    return cli.main([*args, "--experiment", "prof"], probe=probe)


def ncu_argv_of(argv_file) -> list[str]:
    """The argv the stand-in ncu was started with."""
    return json.loads(argv_file.read_text())


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def metrics_asked(argv_file) -> list[str]:
    """The --metrics list the stand-in ncu was given."""
    return flag_value(ncu_argv_of(argv_file), "--metrics").split(",")


def refused_without_a_run(err: str, message: str) -> str:
    """An import refused as bad input (issue 32: main left a FAILED profile run, exit 1): no run,
    the last line of stderr `err` starts with `error: message`; returns that line."""
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: {message}"), line
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    return line


def only_run(experiment="prof"):
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    assert len(runs) == 1
    return runs[0]


def artifact_csv(run_id: str, path: str, tmp_path: Path) -> pd.DataFrame:
    local = mlflow.tracking.MlflowClient().download_artifacts(run_id, path, str(tmp_path / "dl"))
    return pd.read_csv(local)


def warning_lines(err: str) -> list[str]:
    """The `warning:` lines of stderr but the count check's, which these stand-in outputs trip
    (they are not the config's step: tests/test_ncu_completeness.py and the L4 import test it)."""
    return [
        ln
        for ln in err.splitlines()
        if ln.startswith("warning:") and " looks incomplete: " not in ln
    ]


def test_capture_end_to_end_with_standin_ncu(tracking, standin, ncu_dir, tmp_path, capsys):
    child_line = "profiled 2 step(s) of resnet18-b64-fp32-32px on NVIDIA L4 (fp32 math: ieee)"
    argv_file = standin(ncu_dir / L4_CSV, stderr=child_line)  # what train's profile mode prints
    assert capture(tmp_path, "--profile-steps", "2") == 0

    # what ncu was asked to run
    seen = ncu_argv_of(argv_file)
    assert Path(seen[0]).name == "ncu"
    assert flag_value(seen, "--profile-from-start") == "off"
    assert flag_value(seen, "--target-processes") == "all" and "--csv" in seen and "--nvtx" in seen
    metrics = flag_value(seen, "--metrics").split(",")
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics
    assert (
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum" in metrics
    )  # sm_89 from the probe: ops counters
    child = seen[seen.index(sys.executable) :]
    assert child[:3] == [sys.executable, "-m", "train"] and child[-2:] == ["--profile-steps", "2"]
    flags = dict(zip(child[3:-2:2], child[4:-2:2]))
    assert (
        flags["--model"] == "resnet18"
        and flags["--batch"] == "64"
        and flags["--image-size"] == "32"
    )
    assert (
        flags["--device"] == "cuda"
        and flags["--warmup-iters"] == "2"
        and flags["--channels-last"] == "false"
    )

    # the MLflow run
    run = only_run()
    assert run.info.status == "FINISHED"
    expected_key = TrainConfig(
        model="resnet18", batch_size=64, image_size=32, env_label="x"
    ).config_key()
    tags = run.data.tags
    assert tags[schema.TAG_RUN_KIND] == "profile" and tags[schema.TAG_CONFIG_KEY] == expected_key
    assert tags[schema.TAG_CONFIG_LABEL] == "b64/fp32/32px/resnet18"
    assert tags[schema.TAG_NOTE].startswith("ncu profile of b64/fp32/32px/resnet18 (captured) (")
    assert tags[schema.TAG_DEVICE_NAME] == "NVIDIA L4" and tags[schema.TAG_DEVICE_TYPE] == "cuda"
    assert (
        tags[schema.TAG_ENV_LABEL] == "lab-l4" and tags[schema.TAG_INTENSITY_SOURCE] == "measured"
    )
    assert (
        tags["ncu_version"] == "Version 0.0.0.0 (stand-in for tests)"
        and tags["driver_version"] == "555.42"
    )
    assert tags["ncu_source"] == "capture" and tags["ncu_tensor_counters"] == "ops"
    assert tags[schema.TAG_FP32_MATH] == "ieee"  # read back by the profiled program
    p = run.data.params
    assert p["batch_size"] == "64" and p["device"] == "cuda" and p["profile_steps"] == "2"
    assert p["ncu_metric_set"] == "roofline" and p["ncu_replay_mode"] == "kernel"
    m = run.data.metrics
    assert m["ncu_kernels"] == 98
    assert m["ncu_flops_fp32"] == pytest.approx(4.928e9, rel=1e-3)
    assert m["ncu_dram_bytes"] == pytest.approx(7.099e8, rel=1e-3)
    assert m["ncu_kernel_time_s"] == pytest.approx(7.376e-3, rel=1e-3)
    assert m["ncu_intensity_dram_flops_per_byte"] == pytest.approx(6.94, rel=1e-3)
    assert m["ncu_phase_forward_kernels"] == 89

    client = mlflow.tracking.MlflowClient()
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "ncu")}
    log_name = f"b64-fp32-32px-resnet18-{expected_key}.csv"
    assert arts == {
        f"ncu/{n}"
        for n in (
            log_name,
            "top_kernels.csv",
            "top_kernels.txt",
            "kernels.csv",
            "phases.csv",
            "command.txt",
            "console.txt",  # the child's line
            "kernels_by_name.csv",  # the hierarchical roofline (issue 29)
            "phase_levels.csv",
            "hierarchical_roofline.png",
        )
    }
    top = artifact_csv(run.info.run_id, "ncu/top_kernels.csv", tmp_path)
    # the fixture has 18 distinct kernel names (fewer than TOP_KERNELS), so every launch is in the table
    assert top["time_s"].is_monotonic_decreasing and len(top) == 18 and top["launches"].sum() == 98
    kernels = artifact_csv(run.info.run_id, "ncu/kernels.csv", tmp_path)
    assert len(kernels) == 98 and kernels["flops_fp32"].sum() == pytest.approx(4.928e9, rel=1e-3)
    out = capsys.readouterr().out
    assert (
        "98 kernels" in out.splitlines()[-1] and "6.94 FLOP/byte (measured)" in out.splitlines()[-1]
    )


@pytest.mark.parametrize(
    "output, rc, extra, message",
    [
        (
            MESSAGES / "err_nvgpuctrperm.log",
            1,
            [],
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM)",
        ),
        (MESSAGES / "no_kernels.log", 0, [], "ncu profiled no kernels"),
        (
            MESSAGES / "legacy_flop_count_sp.log",
            1,
            ["--metric-set", "seed"],
            "ncu rejects flop_count_sp: these are nvprof-era",
        ),
        (MESSAGES / "app_error.log", 1, [], "the profiled program failed under ncu (exit code 1)"),
        (
            MESSAGES / "na_metrics.csv",
            0,
            [],
            "ncu reported n/a for sm__ops_path_tensor_src_tf32_dst_fp32.sum",
        ),
        (MESSAGES / "not_ncu.csv", 0, [], "is not Nsight Compute CSV output"),
    ],
)
def test_capture_failures_end_the_run_failed_with_the_reason(
    tracking, standin, tmp_path, capsys, output, rc, extra, message
):
    argv_file = standin(output, rc=rc, echo=True)
    assert capture(tmp_path, *extra) == 1 and argv_file.exists()
    run = only_run()
    assert run.info.status == "FAILED"
    assert message in run.data.tags["error"] and "\n" not in run.data.tags["error"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]
    # the raw ncu log stays with the failed run as evidence
    arts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(run.info.run_id, "ncu")}
    assert any(a.endswith(".csv") and "resnet18" in a for a in arts)


def test_an_error_ncu_prints_only_to_the_console_is_classified(tracking, standin, tmp_path, capsys):
    perm_line = (MESSAGES / "err_nvgpuctrperm.log").read_text().splitlines()[1]
    assert perm_line.startswith("==ERROR== ERR_NVGPUCTRPERM")
    argv_file = standin(
        None, rc=1, stderr=perm_line
    )  # no log file at all, the error on stderr only
    assert capture(tmp_path) == 1 and argv_file.exists()
    run = only_run()
    assert run.info.status == "FAILED" and run.data.tags["error"] == PERM_MESSAGE
    err = capsys.readouterr().err.splitlines()
    assert perm_line in err  # still shown to the user as ncu printed it
    assert err[-1] == f"error: {PERM_MESSAGE}"
    local = mlflow.tracking.MlflowClient().download_artifacts(
        run.info.run_id, "ncu/console.txt", str(tmp_path / "dl")
    )
    assert Path(local).read_text() == perm_line + "\n"


def test_tensor_counters_inst_warns_on_sm80_plus(tracking, standin, ncu_dir, tmp_path, capsys):
    argv_file = standin(ncu_dir / L4_CSV)
    rtx3090 = gpu(capability=(8, 6), name="NVIDIA GeForce RTX 3090")
    assert capture(tmp_path, "--tensor-counters", "inst", probe=rtx3090) == 0
    metrics = metrics_asked(argv_file)
    assert "sm__inst_executed_pipe_tensor.sum" in metrics and not any(
        "ops_path" in m for m in metrics
    )
    assert warning_lines(capsys.readouterr().err) == [
        f"warning: --tensor-counters inst: {tensor_inst_caution((8, 6))}"
    ]
    tags = only_run().data.tags
    assert tags["ncu_tensor_counters"] == "inst" and tags["ncu_caution"] == tensor_inst_caution(
        (8, 6)
    )


@pytest.mark.parametrize("cap, cc, factor", [((7, 5), "7.5", 2048), ((8, 6), "8.6", 4096)])
def test_tensor_instruction_caution_is_printed_once(
    tracking, standin, tmp_path, capsys, cap, cc, factor
):
    counters = {
        "sm__inst_executed_pipe_tensor.sum": 10,
        "dram__bytes.sum": 1000,
        **{op_counter(op): 0 for op in ("fadd", "fmul", "ffma")},
    }
    argv_file = standin(details_csv(tmp_path / "log.csv", [counters], cc=cc))
    assert capture(tmp_path, "--tensor-counters", "inst", probe=gpu(capability=cap)) == 0
    assert argv_file.exists()
    run = only_run()
    assert run.data.metrics["ncu_flops_tensor"] == 10 * factor
    caution = tensor_inst_caution(cap)
    warnings = warning_lines(capsys.readouterr().err)
    assert (
        len(warnings) == 1
        and warnings[0].endswith(caution)
        and run.data.tags["ncu_caution"] == caution
    )


def test_tensor_counters_inst_is_refused_without_a_known_factor(
    tracking, standin, ncu_dir, tmp_path
):
    argv_file = standin(ncu_dir / L4_CSV)
    h100 = gpu(capability=(9, 0), name="NVIDIA H100 80GB HBM3")
    assert capture(tmp_path, "--tensor-counters", "inst", probe=h100) == 2
    run = only_run()
    assert run.info.status == "FAILED" and not argv_file.exists()  # refused before ncu ran
    assert run.data.tags["error"].startswith(
        "--tensor-counters inst: no FLOPs-per-instruction factor is known for sm_90"
    )


def test_seed_set_asks_for_names_the_chip_has(tracking, standin, ncu_dir, tmp_path, capsys):
    argv_file = standin(ncu_dir / L4_CSV)
    assert capture(tmp_path, "--metric-set", "seed") == 0
    metrics = metrics_asked(argv_file)
    assert metrics[:3] == [op_counter(op) for op in ("fadd", "fmul", "ffma")]
    assert "flop_count_sp" not in metrics and "pcie__read_bytes.sum" in metrics
    assert "flop_count_sp/flop_count_hp are nvprof metric names" in capsys.readouterr().err
    run = only_run()
    assert run.data.params["ncu_metric_set"] == "seed" and run.data.tags["ncu_chip"] == "AD104"


def test_legacy_names_in_metrics_are_refused_before_ncu_runs(tracking, standin, ncu_dir, tmp_path):
    argv_file = standin(ncu_dir / L4_CSV)
    assert capture(tmp_path, "--metrics", "flop_count_sp") == 2
    run = only_run()
    assert run.info.status == "FAILED" and not argv_file.exists()
    assert run.data.tags["error"].startswith("ncu rejects flop_count_sp: these are nvprof-era")


@pytest.mark.parametrize(
    "flags, probe, wanted, unwanted",
    [
        (
            [
                "--metrics",
                "lts__t_sectors.sum, sm__warps_active.avg.pct_of_peak_sustained_active",
                "--tensor-counters",
                "none",
            ],
            gpu(),
            ["lts__t_sectors.sum", "sm__warps_active.avg.pct_of_peak_sustained_active"],
            ["tensor"],
        ),
        (
            ["--tensor-counters", "inst"],
            gpu(capability=(7, 5), name="Tesla T4"),
            ["sm__inst_executed_pipe_tensor.sum"],
            ["ops_path"],
        ),
        (
            ["--tensor-counters", "ops"],
            gpu(capability=(7, 5), name="Tesla T4"),  # TU104: Turing's own op counters
            [
                "sm__ops_path_tensor_src_fp16_bf16_tf32_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
            ],
            ["inst_executed_pipe_tensor", "src_fp16_dst_fp32"],
        ),
        (
            ["--tensor-counters", "auto"],
            gpu(capability=(7, 0), name="Tesla V100-SXM2-16GB"),
            ["sm__inst_executed_pipe_tensor.sum"],
            ["ops_path"],
        ),
    ],
)
def test_metrics_and_tensor_counters_flags_reach_the_ncu_argv(
    tracking, standin, ncu_dir, tmp_path, flags, probe, wanted, unwanted
):
    argv_file = standin(ncu_dir / L4_CSV)
    assert capture(tmp_path, *flags, probe=probe) == 0
    metrics = metrics_asked(argv_file)
    assert set(wanted) <= set(metrics) and not any(u in m for m in metrics for u in unwanted)
    assert metrics[: len(OPS["fp64"])] == [
        op_counter(op) for op in OPS["fp64"]
    ]  # the roofline set first
    if "--metrics" in flags:
        assert metrics[-2:] == wanted  # extras last, stripped, in the order given
        assert only_run().data.params["ncu_extra_metrics"] == ",".join(wanted)


def test_ncu_not_on_path(tracking, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert capture(tmp_path) == 1
    run = only_run()
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith(
        "`ncu` (Nsight Compute CLI) is not on PATH: install Nsight Compute"
    )


def test_no_cuda_fails_and_points_to_import(tracking, standin, ncu_dir, tmp_path, capsys):
    argv_file = standin(ncu_dir / L4_CSV)
    asked = []

    def no_cuda(device, env_label=None):
        asked.append((device, env_label))
        return GpuInfo(False)

    assert capture(tmp_path, "--device", "cuda:1", probe=no_cuda) == 1
    assert asked == [("cuda:1", "lab-l4")]  # the probe was asked about the configured device
    run = only_run()
    assert run.info.status == "FAILED" and run.data.tags["error"] == NO_GPU_MESSAGE
    assert run.data.params["device"] == "cuda:1"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {NO_GPU_MESSAGE}"] and "--import FILE" in err[0]
    assert not argv_file.exists()  # ncu never ran


# ---------------------------------------------------------------- --import
def test_import_l4_csv_needs_no_gpu_and_no_ncu(tracking, ncu_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    boom = lambda *a, **k: pytest.fail("the import path must not probe CUDA")  # noqa: E731
    assert import_file(ncu_dir / L4_CSV, probe=boom) == 0
    run = only_run()
    assert run.info.status == "FINISHED"
    assert (
        run.data.tags[schema.TAG_DEVICE_NAME] == "NVIDIA L4"
        and run.data.tags["ncu_source"] == "import"
    )
    assert run.data.params["ncu_import_file"] == L4_CSV
    assert run.data.metrics["ncu_intensity_dram_flops_per_byte"] == pytest.approx(6.94, rel=1e-3)
    assert run.data.tags["ncu_chip"] == "AD104"
    arts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(run.info.run_id, "ncu")}
    assert f"ncu/{L4_CSV}" in arts and "ncu/top_kernels.csv" in arts
    assert {"ncu/kernels_by_name.csv", "ncu/hierarchical_roofline.png"} <= arts


def test_the_forward_only_l4_capture_is_imported_as_incomplete_naming_backward(
    tracking, ncu_dir, capsys
):
    """Issue 22, item 3 ("done when"): the L4 fixture's backward phase has 1 kernel and 0 FLOPs;
    held against resnet18 b64 32px's counted training FLOPs it is tagged incomplete, names the
    missing phase and says so in one warning line."""
    assert import_file(ncu_dir / L4_CSV) == 0
    run = only_run()
    tags, m = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED"
    assert tags["ncu_roofline"] == "incomplete" and tags["ncu_missing_phase"] == "backward"
    assert tags["ncu_roofline_missing"] == "backward phase"
    assert tags["ncu_count_check"] == "incomplete"
    assert m["counted_train_flops_per_step"] == 14_100_725_760
    assert m["counted_backward_flops_per_step"] == 9_297_723_392
    assert m["ncu_phase_backward_flops_to_counted_ratio"] == 0.0
    assert m["ncu_flops_to_counted_ratio"] == pytest.approx(0.3495, abs=1e-4)
    # the measured intensity is still logged: analysis leaves it off unless asked
    assert m["ncu_intensity_dram_flops_per_byte"] == pytest.approx(6.94, rel=1e-3)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        f"warning: {L4_CSV} looks incomplete: 4.928e+09 FLOP per step captured against 1.41e+10 "
        "counted for this config (0.35x; forward 1.01x, backward 0.00x), so the backward phase is "
        "missing (tags ncu_roofline=incomplete, ncu_missing_phase); analysis keeps its intensity off "
        "the training point unless asked (python -m analysis --use-incomplete-profiles)"
    ]
    assert "so the backward phase is missing" in tags[schema.TAG_NOTE]


def test_profile_config_key_joins_the_train_run_of_the_same_folder_data(
    tracking, ncu_dir, tmp_path
):
    from tests.helpers import make_image_folder

    root = make_image_folder(tmp_path / "imagenette", classes=("a", "b", "c"), per_class=1)
    assert import_file(ncu_dir / L4_CSV, "--data", str(root)) == 0
    run = only_run()
    assert (
        run.data.params["num_classes"] == "3"
    )  # counted from the folders, as python -m train does
    expected = TrainConfig(
        model="resnet18", batch_size=64, image_size=32, num_classes=3, env_label="x"
    )
    assert run.data.tags[schema.TAG_CONFIG_KEY] == expected.config_key()


def test_import_ncu_rep_reads_the_device_name(tracking, ncu_dir):
    rep = ncu_dir / "t4_matrix_add_1000x1000_set_full.ncu-rep"
    assert cli.main(["--import", str(rep), "--experiment", "prof"], probe=None) == 0
    run = only_run()
    assert (
        run.data.tags[schema.TAG_DEVICE_NAME] == "Tesla T4"
        and run.data.tags["cuda_capability"] == "7.5"
    )
    assert run.data.metrics["ncu_flops_fp32"] == pytest.approx(1.0e6, rel=1e-9)
    assert run.data.metrics["ncu_dram_read_bytes"] == 9_612_288
    assert run.data.metrics["ncu_kernel_time_s"] == pytest.approx(52_576e-9, rel=1e-12)


@pytest.mark.parametrize(
    "file, extra, message",
    [
        (
            MESSAGES / "not_ncu.csv",
            ["--device-name", "NVIDIA L4"],
            "not_ncu.csv is not Nsight Compute CSV output",
        ),
        (
            MESSAGES / "nvprof_metrics.csv",
            ["--device-name", "Tesla K20c"],
            "nvprof_metrics.csv is nvprof output",
        ),
        (L4_CSV, [], f"{L4_CSV} does not name its GPU: pass --device-name"),
    ],
)
def test_import_failures_are_refused_without_a_run(tracking, ncu_dir, capsys, file, extra, message):
    path = file if isinstance(file, Path) else ncu_dir / file
    assert cli.main(["--import", str(path), *extra, "--experiment", "prof"]) == 2
    refused_without_a_run(capsys.readouterr().err, message)


@pytest.mark.parametrize(
    "file, extra, missing, metrics, chip",
    [
        (  # a memory study: DRAM bytes and time, no FLOP counters
            "rtx5070_saxpy_n16777216_details.csv",
            ["--device-name", "NVIDIA GeForce RTX 5070"],
            "FLOP counters",
            {"ncu_dram_read_bytes": 134_221_568, "ncu_dram_bytes": 134_221_568 + 43_631_104},
            "GB205",
        ),
        (  # kernel times only (B200 raw page): the GPU and its chip number come from the file
            "b200_decode_raw_page.csv",
            [],
            "FLOP counters,DRAM bytes",
            {"ncu_kernels": 16},
            "GB100",
        ),
    ],
)
def test_partial_profiles_import_with_what_they_hold_tagged_incomplete(
    tracking, ncu_dir, capsys, file, extra, missing, metrics, chip
):
    assert cli.main([*CONFIG, "--import", str(ncu_dir / file), *extra, "--experiment", "prof"]) == 0
    run = only_run()
    assert run.info.status == "FINISHED"
    tags, m = run.data.tags, run.data.metrics
    assert tags["ncu_roofline"] == "incomplete" and tags["ncu_roofline_missing"] == missing
    assert "flops_fp32" in tags["ncu_missing"] and tags["ncu_chip"] == chip
    for name, value in metrics.items():
        assert m[name] == value
    assert m["ncu_kernel_time_s"] > 0 and "ncu_intensity_dram_flops_per_byte" not in m
    assert not any(k.startswith("ncu_flops") for k in m)
    err = capsys.readouterr().err
    assert f"warning: {file} has no {missing.replace(',', ' and no ')} (found: " in err
    assert "logged as an incomplete profile (tag ncu_roofline=incomplete)" in err


def half_of(src: Path, dest: Path) -> Path:
    """`head -c $((size/2)) src > dest`: a copy that stopped mid-row."""
    data = src.read_bytes()
    dest.write_bytes(data[: len(data) // 2])
    return dest


def test_a_truncated_import_fails_instead_of_logging_wrong_totals(
    tracking, ncu_dir, tmp_path, capsys
):
    """Before: exit 0, FINISHED, 49 kernels at 44.4 FLOP/byte (the whole file: 98 at 6.94)."""
    cut = half_of(ncu_dir / L4_CSV, tmp_path / "cut.csv")
    assert import_file(cut) == 2
    line = refused_without_a_run(
        capsys.readouterr().err,
        "cut.csv is truncated: its last row has 15 of the header's 17 fields, so its totals would "
        "cover only part of the profile; copy or export it again",
    )
    assert "--allow-truncated" in line


def test_allow_truncated_logs_an_incomplete_profile_without_intensities(
    tracking, ncu_dir, tmp_path, capsys
):
    cut = half_of(ncu_dir / L4_CSV, tmp_path / "cut.csv")
    assert import_file(cut, "--allow-truncated") == 0
    run = only_run()
    tags, m = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED" and m["ncu_kernels"] == 49
    assert tags["ncu_roofline"] == "incomplete" and tags["ncu_roofline_missing"] == "complete input"
    assert tags["ncu_truncated"] == "its last row has 15 of the header's 17 fields"
    assert not any(k.startswith("ncu_intensity") for k in m) and m["ncu_flops_total"] > 0
    err = capsys.readouterr().err
    assert "warning: cut.csv is truncated (its last row has 15 of the header's 17 fields)" in err


def test_a_truncated_capture_log_fails(tracking, standin, ncu_dir, tmp_path):
    """ncu killed while writing its log (or a full disk) leaves the same cut table."""
    standin(half_of(ncu_dir / L4_CSV, tmp_path / "cut.csv"))
    assert capture(tmp_path) == 1
    run = only_run()
    assert (
        run.info.status == "FAILED"
        and " is truncated: its last row has 15 of" in (run.data.tags["error"])
    )


def test_an_import_without_any_roofline_counter_is_refused(tracking, tmp_path, capsys):
    f = details_csv(
        tmp_path / "occupancy.csv", [{"sm__warps_active.avg.pct_of_peak_sustained_active": 50}]
    )
    assert import_file(f) == 2
    refused_without_a_run(
        capsys.readouterr().err, "occupancy.csv has none of the roofline counters"
    )


def test_import_of_a_corrupt_ncu_rep_says_it_is_unreadable(tracking, tmp_path, capsys):
    bad = tmp_path / "garbage.ncu-rep"
    bad.write_bytes(bytes((i * 7919 + 13) % 251 for i in range(2000)))
    assert cli.main([*CONFIG, "--import", str(bad), "--experiment", "prof"]) == 2
    line = refused_without_a_run(
        capsys.readouterr().err, "garbage.ncu-rep is not a readable Nsight Compute report"
    )
    assert "launch-skip" not in line


@pytest.mark.parametrize(
    "log, message",
    [
        ("err_nvgpuctrperm.log", PERM_MESSAGE),
        ("no_kernels.log", NO_KERNELS_MESSAGE),
        ("app_error.log", "the profiled program failed under ncu (exit code 1)"),
    ],
)
def test_import_of_an_ncu_error_log_gets_the_capture_message(tracking, capsys, log, message):
    assert import_file(MESSAGES / log) == 2
    err = capsys.readouterr().err
    assert not any("warning" in e for e in err.splitlines())
    refused_without_a_run(err, f"{log} holds ncu's messages but no counter table: {message}")


def details_csv(path: Path, kernels: list[dict[str, float]], cc: str = "8.9") -> Path:
    """A details-page CSV as ncu writes it: one row per kernel and metric (plain units)."""
    rows = [
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Device","CC","Metric Name","Metric Unit","Metric Value"'
    ]
    for i, metrics in enumerate(kernels):
        for name, value in metrics.items():
            rows.append(f'"{i}","1","python3","h","k{i}","0","{cc}","{name}","","{value}"')
    path.write_text("\n".join(rows) + "\n")
    return path


def test_import_warns_and_tags_a_partial_precision(tracking, tmp_path, capsys):
    f = details_csv(
        tmp_path / "partial.csv",
        [
            {
                "sm__sass_thread_inst_executed_op_hfma_pred_on.sum": 10,
                "dram__bytes_read.sum": 30,
                "dram__bytes_write.sum": 10,
            }
        ],
    )
    assert import_file(f) == 0
    run = only_run()
    assert (
        run.data.metrics["ncu_flops_fp16"] == 40
        and run.data.metrics["ncu_intensity_dram_flops_per_byte"] == 1.0
    )
    assert run.data.tags["ncu_partial"] == "flops_fp16: no hadd, hmul counters in 1 of 1 kernels"
    out = capsys.readouterr().err.splitlines()
    assert (
        "warning: flops_fp16 is incomplete (no hadd, hmul counters in 1 of 1 kernels): ncu_flops_fp16 "
        "(where logged) and ncu_flops_total are lower bounds" in out
    )


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_import_of_a_half_precision_config_without_tensor_counters_warns(
    tracking, ncu_dir, capsys, precision
):
    assert import_file(ncu_dir / L4_CSV, "--precision", precision) == 0
    run = only_run()
    assert (
        run.info.status == "FINISHED"
        and run.data.tags["ncu_tensor_undercount"] == "no tensor-core counters"
    )
    assert warning_lines(capsys.readouterr().err) == [
        f"warning: --precision {precision} but the input has no tensor-core counters: its tensor-core work is "
        "missing from ncu_flops_total, which is undercounted (profile with the chip's sm__ops_path_tensor_* "
        "counters, Turing on, or sm__inst_executed_pipe_tensor.sum on Volta)"
    ]


def test_import_of_half_precision_with_zero_tensor_ops_and_of_fp32_without(
    tracking, tmp_path, capsys
):
    f = details_csv(
        tmp_path / "zero.csv",
        [
            {
                "sm__ops_path_tensor_src_fp16.sum": 0,
                "dram__bytes.sum": 4,
                **{op_counter(op): 1 for op in ("fadd", "fmul", "ffma")},
            }
        ],
    )
    base = ["--import", str(f), "--device-name", "NVIDIA L4", "--experiment", "prof"]
    assert cli.main([*CONFIG, "--precision", "fp16", *base]) == 0
    assert only_run().data.tags["ncu_tensor_undercount"] == "tensor-core counters read 0"
    assert (
        "warning: --precision fp16 but the tensor-core counters read 0" in capsys.readouterr().err
    )
    mlflow.delete_experiment(mlflow.get_experiment_by_name("prof").experiment_id)
    assert cli.main([*CONFIG, *base[:-1], "prof2"]) == 0  # fp32: tensor cores are not expected
    run = mlflow.search_runs(experiment_names=["prof2"], output_format="list")[0]
    assert "ncu_tensor_undercount" not in run.data.tags
    assert warning_lines(capsys.readouterr().err) == []


# ---------------------------------------------------------------- bad input: exit 2, no run
@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "cpu"], "--device must be cuda or cuda:N"),
        (["--batch", "0"], "batch_size must be a positive integer"),
        (["--profile-steps", "0"], "profile_steps must be >= 1"),
        (["--launch-count", "0"], "launch_count must be >= 1"),
        (["--import", "/nonexistent.csv"], "--import /nonexistent.csv: no such file or folder"),
        (
            ["--import", "a.csv", "b.csv", "--phase", "forward", "backward", "optimizer"],
            "--phase gives 3 phases for 2 --import paths",
        ),
        (["--phase", "backward"], "--workload and --phase describe imported files"),
        (
            ["--import", "a.csv", "--phase", "sideways"],
            "--phase must be among forward, backward, optimizer, step",
        ),
    ],
)
def test_bad_input_is_a_usage_error_without_a_run(tracking, capsys, args, message):
    assert cli.main([*args, "--experiment", "prof"], probe=gpu()) == 2
    assert message in capsys.readouterr().err
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []


@pytest.mark.parametrize("importing", [True, False], ids=["import", "capture"])
def test_unknown_model_is_a_usage_error_on_both_paths(
    tracking, standin, ncu_dir, tmp_path, capsys, importing
):
    argv_file = standin(ncu_dir / L4_CSV)
    where = (
        ["--import", str(ncu_dir / L4_CSV), "--device-name", "NVIDIA L4"]
        if importing
        else ["--out", str(tmp_path / "o")]
    )
    assert cli.main(["--model", "notamodel", *where, "--experiment", "prof"], probe=gpu()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    if importing:  # the model is checked once the files are read (torchvision costs 30 s)
        assert err.pop(0).startswith("importing ")
    assert err == [
        "error: unknown model 'notamodel': see torchvision.models.list_models(), timm:NAME or "
        "module:callable"
    ]
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []
    assert not argv_file.exists()  # ncu never ran


def test_model_name_is_canonicalised_like_train_does(tracking, ncu_dir):
    assert import_file(ncu_dir / L4_CSV, "--model", "ResNet18") == 0
    run = only_run()
    assert run.data.params["model"] == "resnet18"
    expected = TrainConfig(
        model="resnet18", batch_size=64, image_size=32, env_label="x"
    ).config_key()
    assert run.data.tags[schema.TAG_CONFIG_KEY] == expected


def test_mlproject_style_empty_strings_mean_unset():
    args = cli.build_parser().parse_args(
        ["--import", "", "--launch-count", "", "--device-name", "", "--experiment", ""]
    )
    assert (
        import_path.import_paths(args) == []
        and args.launch_count is None
        and args.device_name is None
        and args.experiment is None
    )


def test_config_flags_round_trip_through_train_parser():
    import argparse

    from train.config import add_config_args, config_from_args

    args = cli.build_parser().parse_args([*CONFIG, "--channels-last", "true", "--device", "cuda:1"])
    flags = config_flags(args)
    p = argparse.ArgumentParser()
    add_config_args(p)
    again = config_from_args(p.parse_args(flags))
    assert again == config_from_args(args)


# ---------------------------------------------------------------- the real CUDA check and a real capture
def test_real_probe_agrees_with_torch():
    import torch

    info = cuda_probe("cuda")
    assert info.available == torch.cuda.is_available()
    if info.available:
        assert info.name == torch.cuda.get_device_name(0)
        assert info.capability == tuple(torch.cuda.get_device_capability(0))


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
def test_real_capture_attributes_backward_kernels(tracking, tmp_path):
    """On a GPU with ncu: one tiny training step; backward kernels must carry FLOPs (start/end ranges)."""
    args = [
        "--model",
        "resnet18",
        "--batch",
        "2",
        "--image-size",
        "32",
        "--warmup-iters",
        "1",
        "--profile-steps",
        "1",
        "--out",
        str(tmp_path / "o"),
        "--experiment",
        "prof",
    ]
    assert cli.main(args) == 0
    run = only_run()
    m = run.data.metrics
    assert run.info.status == "FINISHED" and m["ncu_kernels"] > 0 and m["ncu_flops_total"] > 0
    assert m["ncu_dram_bytes"] > 0 and m["ncu_intensity_dram_flops_per_byte"] > 0
    assert m.get("ncu_phase_backward_flops_share", 0) > 0.2  # backward ~ 2x forward work


# ---------------------------------------------------------------- capture options that keep the numbers honest
def test_cache_control_and_the_capture_params(tracking, standin, ncu_dir, tmp_path):
    argv_file = standin(ncu_dir / L4_CSV)
    assert capture(tmp_path, "--cache-control", "none") == 0
    seen = ncu_argv_of(argv_file)
    assert flag_value(seen, "--cache-control") == "none"
    assert flag_value(seen, "--target-processes") == "all" and seen[-1] != "--no-cudnn-benchmark"
    p = only_run().data.params
    assert p["ncu_cache_control"] == "none" and p["ncu_target_processes"] == "all"


def test_compile_profiles_the_application_only(tracking, standin, ncu_dir, tmp_path, capsys):
    argv_file = standin(ncu_dir / L4_CSV)
    assert capture(tmp_path, "--compile", "true") == 0
    assert flag_value(ncu_argv_of(argv_file), "--target-processes") == "application-only"
    assert "not injected into Inductor's compile workers" in capsys.readouterr().err


HELP_WITH = "  --replay-mode arg (=kernel)   Mechanism:\n      kernel (default)\n      application\n{more}  --csv\n"


@pytest.mark.parametrize("mode", ["application", "app-range"])
def test_application_replay_turns_cudnn_autotuning_off_and_says_so(
    tracking, standin, ncu_dir, tmp_path, monkeypatch, capsys, mode
):
    argv_file = standin(ncu_dir / L4_CSV)
    monkeypatch.setenv("STANDIN_HELP", HELP_WITH.format(more="      range\n      app-range\n"))
    assert capture(tmp_path, "--replay-mode", mode) == 0
    seen = ncu_argv_of(argv_file)
    assert seen[-3:] == ["--profile-steps", "1", "--no-cudnn-benchmark"]
    assert flag_value(seen, "--replay-mode") == mode
    assert f"note: --replay-mode {mode} reruns the program once per pass" in capsys.readouterr().err


def test_a_replay_mode_the_installed_ncu_lacks_ends_the_run_before_ncu_runs(
    tracking, standin, ncu_dir, tmp_path, monkeypatch
):
    argv_file = standin(ncu_dir / L4_CSV)
    monkeypatch.setenv("STANDIN_HELP", HELP_WITH.format(more=""))  # an ncu without range modes
    assert capture(tmp_path, "--replay-mode", "app-range") == 1
    run = only_run()
    assert run.info.status == "FAILED" and not argv_file.exists()
    assert run.data.tags["error"] == (
        "this ncu (Version 0.0.0.0 (stand-in for tests)) does not offer --replay-mode app-range (its "
        "--help lists: kernel, application): update Nsight Compute or choose one of those"
    )


@pytest.mark.parametrize("where", [["--out", "o"], ["--dry-run", "--compute-capability", "8.9"]])
def test_profiling_without_warmup_is_refused(tracking, capsys, where):
    assert (
        cli.main([*CONFIG, "--warmup-iters", "0", *where, "--experiment", "prof"], probe=gpu()) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --warmup-iters 0: the profiled step would hold cuDNN autotuning, first allocations and, "
        "with fp16, GradScaler's skipped optimizer step; profile after at least 1 warmup step (default 5)"
    ]
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []


def test_an_import_may_describe_a_run_without_warmup(tracking, ncu_dir):
    assert import_file(ncu_dir / L4_CSV, "--warmup-iters", "0") == 0


# ---------------------------------------------------------------- --dry-run: the command for a GPU, without one
def dry_run(capsys, *flags) -> tuple[int, list[str], list[str], str]:
    """(exit code, ncu argv from the first stdout line, metric list, stderr) of a --dry-run."""
    boom = lambda *a, **k: pytest.fail("--dry-run must not probe CUDA")  # noqa: E731
    code = cli.main(["--dry-run", *CONFIG, *flags, "--experiment", "prof"], probe=boom)
    seen = capsys.readouterr()
    lines = seen.out.splitlines()
    if code != 0:
        return code, [], [], seen.err
    argv = shlex.split(lines[0])
    metrics = flag_value(argv, "--metrics").split(",")
    listed = [ln[len("#   ") :] for ln in lines if ln.startswith("#   ")]
    assert listed == metrics and all(ln.startswith("#") for ln in lines[1:])
    return code, argv, metrics, seen.err


@pytest.mark.parametrize(
    "cc, chip",
    [
        ("7.5", "TU104"),
        ("8.0", "GA100"),
        ("8.6", "GA102"),
        ("8.9", "AD102"),
        ("9.0", "GH100"),
        ("10.0", "GB100"),
        ("12.0", "GB202"),
    ],
)
def test_dry_run_lists_names_the_database_accepts_for_the_chip(
    tracking, monkeypatch, tmp_path, capsys, cc, chip
):
    """Issue 11's "done when": every name of the printed list exists on the chip of that capability."""
    from profiling.ncu import nvperf

    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu anywhere
    code, argv, metrics, err = dry_run(capsys, "--compute-capability", cc)
    assert code == 0 and argv[0] == "ncu"
    assert argv[argv.index(sys.executable) :][:3] == [sys.executable, "-m", "train"]
    assert argv[-2:] == ["--profile-steps", "1"]
    db = nvperf.open_database()
    with db.chip(chip) as live:
        assert [n for n in metrics if not live.has(n)] == []
    assert any(n.startswith("sm__ops_path_tensor_") for n in metrics)
    assert any(n.startswith("dram__bytes") for n in metrics)
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []


@pytest.mark.parametrize(
    "cc, chip, packed", [("10.0", "GB100", True), ("10.3", "GB110", True), ("12.0", "GB202", False)]
)
def test_dry_run_asks_for_packed_fp32_where_the_chip_counts_it(tracking, capsys, cc, chip, packed):
    """Issue 22's "done when": --compute-capability 10.0 --precision fp32 lists fadd2/fmul2/ffma2,
    and every printed name passes NVIDIA's metric database."""
    from profiling.ncu import nvperf

    code, argv, metrics, err = dry_run(capsys, "--compute-capability", cc, "--precision", "fp32")
    wanted = [op_counter(op) for op in ("fadd2", "fmul2", "ffma2")]
    assert code == 0 and [n for n in wanted if n in metrics] == (wanted if packed else [])
    with nvperf.open_database().chip(chip) as live:
        assert [n for n in metrics if not live.has(n)] == []


@pytest.mark.parametrize(
    "flags", [["--device-name", "Tesla V100-SXM2-16GB"], ["--compute-capability", "7.0"]]
)
def test_dry_run_for_volta_says_in_one_line_which_ncu_profiles_it(tracking, capsys, flags):
    code, argv, metrics, err = dry_run(capsys, *flags)
    notes = [ln for ln in err.splitlines() if "Volta" in ln]
    assert code == 0 and len(notes) == 1
    assert notes[0].startswith("note: GV100 (Volta) is not in NVIDIA's metric database of ")
    assert "ncu 2025.3.1 or older" in notes[0]
    # Volta's tensor counter (instructions x 512), never the Ampere+ ops names
    assert "sm__inst_executed_pipe_tensor.sum" in metrics
    assert not any(n.startswith("sm__ops_path_tensor") for n in metrics)


def test_the_dry_run_example_in_the_docs_is_what_the_dry_run_prints(
    tracking, capsys, monkeypatch, tmp_path
):
    """docs/profiling.md shows a dry run's output under its `$ python -m profiling ...` line; it is
    that command's stdout with the repository's path left out, the interpreter written `python`
    and the --metrics value written `…` (the list follows as `#` lines). Issue 22: the example
    lacked the --cache-control all that the dry run prints."""
    doc = (Path(cli.__file__).resolve().parents[1] / "docs" / "profiling.md").read_text()
    prompt = "$ python -m profiling "
    start = doc.index(prompt)
    block = doc[start : doc.index("```", start)].rstrip("\n").splitlines()
    argv = shlex.split(block[0][len(prompt) :])
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu: the command starts with `ncu`
    assert cli.main(argv, probe=lambda *a, **k: pytest.fail("no probe")) == 0
    root = str(Path(cli.__file__).resolve().parents[1]) + "/"
    printed = capsys.readouterr().out.replace(sys.executable, "python").replace(root, "")
    command, *listed = printed.splitlines()
    parts = shlex.split(command)
    parts[parts.index("--metrics") + 1] = "…"
    assert "--cache-control" in parts
    assert [" ".join(parts), *listed] == block[1:]


BF16_ON_T4 = (
    "Tesla T4 (sm_75) has no native bf16 (needs sm_80+; torch would emulate it, which is not what a "
    "bf16 benchmark measures): use --precision fp16 or fp32"
)
"""The line `python -m train --precision bf16` prints on a T4 (tests/test_train.py)."""


@pytest.mark.parametrize(
    "precision, gpu_flags, line",
    [
        ("bf16", ["--device-name", "Tesla T4"], BF16_ON_T4),
        ("bf16", ["--device-name", "Tesla T4", "--compute-capability", "7.5"], BF16_ON_T4),
        (
            "bf16",
            ["--compute-capability", "7.5"],
            "the GPU (sm_75) has no native bf16 (needs sm_80+; torch would emulate it, which is "
            "not what a bf16 benchmark measures): use --precision fp16 or fp32",
        ),
        (
            "tf32",
            ["--compute-capability", "7.5"],
            "the GPU (sm_75) has no TF32 tensor cores (needs sm_80+): use --precision fp32 (IEEE "
            "FP32) or fp16",
        ),
    ],
)
def test_dry_run_refuses_a_precision_the_gpu_lacks_in_one_line(
    tracking, capsys, precision, gpu_flags, line
):
    """Issue 22, item 4: refused before anything runs, with the line the run would print, and
    nothing else (no note about the chip first)."""
    code, _, _, err = dry_run(capsys, "--precision", precision, *gpu_flags)
    assert code == 2 and err.strip().splitlines() == [f"error: {line}"]
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []


def test_a_capture_of_bf16_on_a_t4_ends_before_ncu_starts(tracking, standin, ncu_dir, tmp_path):
    argv_file = standin(ncu_dir / L4_CSV)
    probe = gpu(capability=(7, 5), name="Tesla T4")
    assert capture(tmp_path, "--precision", "bf16", probe=probe) == 2
    assert not argv_file.exists()  # ncu never started
    run = only_run()
    assert run.info.status == "FAILED" and run.data.tags[schema.TAG_ERROR] == BF16_ON_T4


def test_dry_run_of_tf32_on_ampere_lists_the_tf32_tensor_counters(tracking, capsys):
    """Issue 22's "done when": --precision tf32 with 8.0 lists TF32 tensor counters, every name
    valid on GA100."""
    from profiling.ncu import nvperf

    code, argv, metrics, err = dry_run(capsys, "--compute-capability", "8.0", "--precision", "tf32")
    assert code == 0 and "sm__ops_path_tensor_src_tf32_dst_fp32.sum" in metrics
    child = argv[argv.index(sys.executable) :]
    assert child[child.index("--precision") + 1] == "tf32"
    with nvperf.open_database().chip("GA100") as live:
        assert [n for n in metrics if not live.has(n)] == []


@pytest.mark.parametrize("cc, chip", [("8.7", "GA10B"), ("12.1", "GB20B")])
def test_dry_run_on_a_chip_without_dram_counters_says_so_and_still_counts_flops(
    tracking, capsys, cc, chip
):
    code, argv, metrics, err = dry_run(capsys, "--compute-capability", cc)
    assert code == 0 and not any(n.startswith("dram__") for n in metrics)
    assert op_counter("ffma") in metrics and "gpu__time_duration.sum" in metrics
    assert f"note: {chip} has no DRAM counters (no dram__bytes* metric" in err


def test_dry_run_by_device_name_and_with_extra_metrics(tracking, capsys):
    code, argv, metrics, err = dry_run(
        capsys, "--device-name", "NVIDIA GeForce RTX 5090", "--metrics", "lts__t_sectors.sum"
    )
    assert code == 0 and metrics[-1] == "lts__t_sectors.sum"
    assert "dram__bytes_op_read.sum" in metrics and "dram__bytes_read.sum" not in metrics
    code, argv, metrics, err = dry_run(
        capsys, "--device-name", "NVIDIA GeForce RTX 5090", "--metrics", "dram__bytes_read.sum"
    )
    assert code == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("error: --metrics: GB202 has no metric dram__bytes_read.sum (nearest: ")
    )


def test_dry_run_on_a_capability_that_covers_two_counter_sets_notes_the_choice(tracking, capsys):
    code, argv, metrics, err = dry_run(capsys, "--compute-capability", "7.5")
    assert "note: compute capability 7.5 covers TU102/TU104/TU106/TU116/TU117" in err
    code, argv, metrics, err = dry_run(capsys, "--device-name", "NVIDIA GeForce GTX 1660 Ti")
    assert code == 0 and not any("tensor" in n for n in metrics)
    assert "TU116 has no sm__ops_path_tensor_* counters" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "--dry-run needs the GPU to plan for: --device-name NAME"),
        (["--compute-capability", "90"], "expected a compute capability such as 8.6, got '90'"),
        (["--compute-capability", "9.0", "--import", "x.csv"], "--dry-run plans a capture"),
    ],
)
def test_dry_run_usage_errors(tracking, capsys, flags, message):
    code, _, _, err = dry_run(capsys, *flags)
    assert code == 2 and message in err
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []


def test_an_import_carries_the_profiled_machines_env_label_or_none(
    tracking, ncu_dir, capsys, monkeypatch
):
    """Issue 15: an import was tagged with the importing host's label next to device_name
    NVIDIA L4; the label is the profiled machine's, which only --env-label knows."""
    monkeypatch.setattr(schema, "default_env_label", lambda: "importing-laptop")
    base = ["--model", "resnet18", "--batch", "64", "--image-size", "32", "--experiment", "prof"]
    base += ["--device-name", "NVIDIA L4"]
    assert cli.main([*base, "--import", str(ncu_dir / L4_CSV)]) == 0
    assert "env_label" not in only_run().data.tags
    assert "note: no --env-label: the import is logged without env_label" in capsys.readouterr().err
    assert import_file(ncu_dir / L4_CSV) == 0  # CONFIG says --env-label lab-l4
    runs = mlflow.search_runs(experiment_names=["prof"], output_format="list")
    assert sorted(r.data.tags.get("env_label", "") for r in runs) == ["", "lab-l4"]


def test_an_import_stores_only_what_parsed_as_ncu_output(tracking, tmp_path, capsys):
    """Issue 15: /etc/passwd became ncu/passwd of a FAILED run (a 200 MB garbage file, 200 MB);
    issue 32: it makes no run at all (exit 2)."""
    junk = tmp_path / "passwd"
    junk.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/sh\n")
    assert import_file(junk) == 2
    assert "is not Nsight Compute CSV output" in refused_without_a_run(
        capsys.readouterr().err, "passwd"
    )


def test_an_import_of_an_empty_folder_or_an_oversized_file_is_refused_before_a_run(
    tracking, ncu_dir, tmp_path, capsys, monkeypatch
):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert import_file(empty) == 2
    assert f"--import {empty}: an empty folder (no file in it to read)" in capsys.readouterr().err
    monkeypatch.setattr(import_path, "MAX_IMPORT_BYTES", 1024**3 // 10)  # 0.1 GiB
    big = tmp_path / "big.csv"
    with big.open("wb") as f:
        f.truncate(1024**3 // 5)  # sparse: 0.2 GiB on paper, nothing on disk
    assert import_file(big) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: --import {big} is 0.2 GiB, more than the 0.1 GiB an ncu CSV or .ncu-rep of a profiled "
        "training step holds: export only the profiled step (ncu --launch-skip/--launch-count, "
        "--metrics) or check that it is the right file"
    ]
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []
