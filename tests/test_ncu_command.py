"""profiling.ncu.command: the ncu argument list per option, option validation, ncu failures as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import BenchError
from profiling.ncu.command import (
    CaptureOptions,
    check_replay_mode,
    ncu_argv,
    replay_modes_offered,
    resolve_ncu,
    run_ncu,
    train_argv,
)
from profiling.ncu.messages import NO_KERNELS_MESSAGE, PERM_MESSAGE, classify_ncu_output

MESSAGES = Path(__file__).resolve().parent / "data" / "ncu_messages"
PROGRAM = ["/usr/bin/python3", "-m", "train", "--batch", "2", "--profile-steps", "1"]


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_default_argv_is_a_list_with_the_capture_flags_then_the_program():
    argv = ncu_argv("/opt/ncu", "/tmp/log.csv", ["a.sum", "b.sum"], CaptureOptions(), PROGRAM)
    assert argv[0] == "/opt/ncu" and all(isinstance(a, str) for a in argv)
    assert _value(argv, "--profile-from-start") == "off"
    assert _value(argv, "--target-processes") == "all"
    assert "--csv" in argv and "--nvtx" in argv
    assert _value(argv, "--page") == "details" and _value(argv, "--print-units") == "base"
    assert _value(argv, "--log-file") == "/tmp/log.csv"
    assert _value(argv, "--metrics") == "a.sum,b.sum"
    assert _value(argv, "--replay-mode") == "kernel" and _value(argv, "--clock-control") == "base"
    assert _value(argv, "--cache-control") == "all"  # ncu's default, said explicitly
    assert "--launch-skip" not in argv and "--launch-count" not in argv
    assert argv[-len(PROGRAM) :] == PROGRAM  # the program comes last, untouched


@pytest.mark.parametrize("mode", ["kernel", "application", "range", "app-range"])
def test_replay_mode(mode):
    argv = ncu_argv("ncu", "l", ["m"], CaptureOptions(replay_mode=mode), PROGRAM)
    assert _value(argv, "--replay-mode") == mode


@pytest.mark.parametrize("clock", ["base", "none"])
def test_clock_control(clock):
    assert (
        _value(
            ncu_argv("ncu", "l", ["m"], CaptureOptions(clock_control=clock), PROGRAM),
            "--clock-control",
        )
        == clock
    )


@pytest.mark.parametrize("cache", ["all", "none"])
def test_cache_control(cache):
    argv = ncu_argv("ncu", "l", ["m"], CaptureOptions(cache_control=cache), PROGRAM)
    assert _value(argv, "--cache-control") == cache


def test_target_processes_application_only():
    argv = ncu_argv("ncu", "l", ["m"], CaptureOptions(target_processes="application-only"), PROGRAM)
    assert _value(argv, "--target-processes") == "application-only"


def test_launch_skip_and_count():
    argv = ncu_argv("ncu", "l", ["m"], CaptureOptions(launch_skip=5, launch_count=40), PROGRAM)
    assert _value(argv, "--launch-skip") == "5" and _value(argv, "--launch-count") == "40"
    assert argv.index("--launch-count") < argv.index(PROGRAM[0])


def test_extra_ncu_args_go_before_the_program():
    argv = ncu_argv(
        "ncu", "l", ["m"], CaptureOptions(extra_ncu_args=("--cache-control", "none")), PROGRAM
    )
    assert argv[-len(PROGRAM) - 2 : -len(PROGRAM)] == ["--cache-control", "none"]


def test_train_argv():
    assert train_argv("/py", ["--model", "resnet18"], 3) == [
        "/py",
        "-m",
        "train",
        "--model",
        "resnet18",
        "--profile-steps",
        "3",
    ]


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("kernel", []),
        ("range", []),
        ("application", ["--no-cudnn-benchmark"]),
        ("app-range", ["--no-cudnn-benchmark"]),
    ],
)
def test_application_replay_runs_the_program_without_cudnn_autotuning(mode, extra):
    argv = train_argv("/py", ["--model", "resnet18"], 1, mode)
    assert argv[:6] == ["/py", "-m", "train", "--model", "resnet18", "--profile-steps"]
    assert argv[7:] == extra
    from train.__main__ import build_parser  # the flag is one `python -m train` takes

    assert build_parser().parse_args(argv[3:]).no_cudnn_benchmark == bool(extra)


@pytest.mark.parametrize("benchmark", [True, False])
def test_profile_mode_without_cudnn_benchmark_leaves_the_autotuner_off(monkeypatch, benchmark):
    """train.profile_mode.profile_steps(cudnn_benchmark=False) (what --no-cudnn-benchmark passes)."""
    import torch

    from train.profile_mode import profile_steps
    from train.config import TrainConfig

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    cfg = TrainConfig(
        model="resnet18", batch_size=2, image_size=32, warmup_iters=1, iters=1, device="cpu"
    )
    seen = []
    profile_steps(
        cfg,
        torch.device("cpu"),
        1,
        profiler_start=lambda: seen.append(torch.backends.cudnn.benchmark),
        profiler_stop=lambda: None,
        cudnn_benchmark=benchmark,
    )
    assert seen == [benchmark]


# ncu --help: the --replay-mode block in the layout ncu prints (values indented under the option)
HELP = """  --clock-control arg (=base)           Control the behavior of the GPU clocks during profiling. Allowed values:
                                          base
                                          none
  --replay-mode arg (=kernel)           Mechanism used for replaying a kernel launch multiple times to collect
                                        all requested profiling data:
                                          kernel (default)
                                          application
                                          range
                                          app-range
  --app-replay-buffer arg (=file)       Application replay buffer location:
                                          file
"""


def test_replay_modes_are_read_from_ncu_help():
    assert replay_modes_offered(HELP) == {"kernel", "application", "range", "app-range"}
    older = HELP.replace("                                          range\n", "").replace(
        "                                          app-range\n", ""
    )
    assert replay_modes_offered(older) == {"kernel", "application"}
    short = "  --replay-mode arg (=kernel)           Mechanism used for replaying a kernel launch.\n  --csv   x\n"
    assert replay_modes_offered(short) is None and replay_modes_offered("") is None


def test_a_replay_mode_the_installed_ncu_lacks_is_refused():
    assert check_replay_mode("ncu", "kernel", help_text="") is None  # never asked
    assert check_replay_mode("ncu", "app-range", help_text=HELP) is None
    older = HELP.replace("                                          app-range\n", "")
    with pytest.raises(
        BenchError,
        match="does not offer --replay-mode app-range \\(its --help lists: kernel, application, range\\)",
    ):
        check_replay_mode("ncu", "app-range", help_text=older)
    assert "not checked" in check_replay_mode("ncu", "range", help_text="no such layout")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"profile_steps": 0}, "profile_steps"),
        ({"metric_set": "full"}, "metric_set"),
        ({"replay_mode": "graph"}, "replay_mode"),
        ({"clock_control": "boost"}, "clock_control"),
        ({"cache_control": "some"}, "cache_control"),
        ({"target_processes": "children"}, "target_processes"),
        ({"launch_skip": -1}, "launch_skip"),
        ({"launch_count": 0}, "launch_count"),
        ({"tensor_counters": "hmma"}, "tensor_counters"),
        ({"extra_metrics": ("dram bytes",)}, "extra_metrics"),
    ],
)
def test_capture_options_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field} "):
        CaptureOptions(**kwargs)


def test_legacy_metrics_are_spotted_in_the_extras():
    assert (
        CaptureOptions(metric_set="seed").legacy_metrics == []
    )  # the seed set asks for valid names
    assert CaptureOptions(extra_metrics=("flop_count_dp", "lts__t_bytes.sum")).legacy_metrics == [
        "flop_count_dp"
    ]
    assert CaptureOptions().legacy_metrics == []


# ---------------------------------------------------------------- error mapping from recorded messages
def _log(name: str) -> str:
    return (MESSAGES / name).read_text()


def test_perm_error_says_the_fix():
    msg = classify_ncu_output(_log("err_nvgpuctrperm.log"), 1)
    assert msg == PERM_MESSAGE
    assert (
        "NVreg_RestrictProfilingToAdminUsers=0" in msg
        and "--cap-add SYS_ADMIN" in msg
        and "\n" not in msg
    )


def test_legacy_metric_error_names_nvprof():
    msg = classify_ncu_output(_log("legacy_flop_count_sp.log"), 1)
    assert msg.startswith("ncu rejects flop_count_sp: these are nvprof-era metric names")
    assert "--metric-set roofline" in msg


def test_unknown_metric_error_names_the_metric():
    msg = classify_ncu_output(_log("unknown_metric.log"), 1)
    assert msg.startswith(
        "ncu does not know metric(s) sm__ops_path_tensor_src_tf32_dst_fp32 on this GPU"
    )
    assert "--tensor-counters inst|none" in msg


def test_program_failure_wins_over_no_kernels():
    msg = classify_ncu_output(_log("app_error.log"), 1)
    assert msg.startswith("the profiled program failed under ncu (exit code 1)")


def test_no_kernels():
    assert classify_ncu_output(_log("no_kernels.log"), 0) == NO_KERNELS_MESSAGE


def test_other_errors_and_exit_codes():
    assert classify_ncu_output(
        "==ERROR== Profiling failed because a driver resource was unavailable.", 1
    ) == ("ncu failed: Profiling failed because a driver resource was unavailable.")
    assert (
        classify_ncu_output("==PROF== Connected\nsegfault", -11)
        == "ncu exited with code -11: segfault"
    )


def test_a_good_log_is_not_an_error(ncu_dir):
    assert (
        classify_ncu_output(
            (ncu_dir / "rtx5070_saxpy_n16777216_details.csv").read_text(encoding="utf-8-sig"), 0
        )
        is None
    )


def test_ncu_not_on_path_says_how_to_install():
    with pytest.raises(
        BenchError, match=r"`ncu` \(Nsight Compute CLI\) is not on PATH: install Nsight Compute"
    ):
        resolve_ncu("ncu", which=lambda name: None)
    with pytest.raises(BenchError, match="ncu not found at /nonexistent/ncu: install"):
        resolve_ncu("/nonexistent/ncu")
    assert (
        resolve_ncu("ncu", which=lambda name: "/usr/local/cuda/bin/ncu")
        == "/usr/local/cuda/bin/ncu"
    )


# ---------------------------------------------------------------- run_ncu: tee and keep the console
def _script(tmp_path: Path, body: str) -> list[str]:
    import sys

    f = tmp_path / "fake_ncu.py"
    f.write_text("import sys\n" + body)
    return [sys.executable, str(f)]


def test_run_ncu_shows_and_keeps_stdout_and_stderr(tmp_path, capsys):
    argv = _script(
        tmp_path,
        'print("program line")\nsys.stdout.flush()\n'
        'print("==ERROR== ERR_NVGPUCTRPERM - no permission", file=sys.stderr)\nsys.exit(3)\n',
    )
    ran = run_ncu(argv, tmp_path / "log.csv", poll_s=60)
    assert ran.returncode == 3
    # two pipes, two reader threads: which stream's line is kept first is not defined
    assert sorted(ran.console.splitlines()) == [
        "==ERROR== ERR_NVGPUCTRPERM - no permission",
        "program line",
    ]
    seen = capsys.readouterr()
    assert (
        seen.out == "program line\n" and seen.err == "==ERROR== ERR_NVGPUCTRPERM - no permission\n"
    )
    assert classify_ncu_output(ran.console, ran.returncode) == PERM_MESSAGE


def test_run_ncu_keeps_every_ncu_line_and_only_the_tail_of_the_rest(tmp_path, capsys):
    from profiling.ncu.command import CONSOLE_TAIL_LINES

    argv = _script(
        tmp_path,
        'print("==PROF== Connected to process 1")\n'
        'for i in range(1000): print(f"step {i}")\n'
        'print("==WARNING== No kernels were profiled.")\n',
    )
    ran = run_ncu(argv, tmp_path / "log.csv", poll_s=60)
    lines = ran.console.splitlines()
    assert ran.returncode == 0 and len(lines) == CONSOLE_TAIL_LINES + 2
    assert (
        lines[0] == "==PROF== Connected to process 1"
        and lines[-1] == "==WARNING== No kernels were profiled."
    )
    assert lines[1] == f"step {1000 - CONSOLE_TAIL_LINES}" and lines[-2] == "step 999"
    assert len(capsys.readouterr().out.splitlines()) == 1002  # the terminal saw everything
    assert classify_ncu_output(ran.console, 0) == NO_KERNELS_MESSAGE


def test_run_ncu_that_cannot_start_says_how_to_install(tmp_path):
    with pytest.raises(BenchError, match="cannot start /nonexistent/ncu: .*install Nsight Compute"):
        run_ncu(["/nonexistent/ncu"], tmp_path / "log.csv")


def test_ncu_runs_train_from_the_repository_root():
    """capture runs ncu (and so `python -m train`) in the repository root, where train/ imports,
    and writes its logs under out/profile there by default, wherever profiling/ncu/ sits."""
    from profiling.ncu import capture
    from tests.conftest import ROOT

    assert capture.ROOT == ROOT and (capture.ROOT / "train" / "__main__.py").is_file()
    assert capture.DEFAULT_OUT == ROOT / "out" / "profile"
