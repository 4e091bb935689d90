"""`mlflow run .` with --env-manager local: the MLproject maps onto python -m train, and its
entry points pass every TrainConfig field with the dataclass's default."""

from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
from dataclasses import asdict

import mlflow
import pytest
import yaml

from common import flags
from common.flags import flag_fields, flag_names
from tests.conftest import ROOT
from train.config import DISTRIBUTED_FIELDS, TrainConfig, config_from_args

# The entry points that run a training config: the module whose parser reads their command.
CONFIG_ENTRIES = {
    "main": "train.__main__",
    "distributed": "train.__main__",
    "profile": "profiling.cli",
    "sweep": "train.sweep.__main__",
}
# Fields an entry point leaves out on purpose.
NOT_PASSED = {
    "main": DISTRIBUTED_FIELDS,  # one process: the `distributed` entry point passes them
    # profile mode runs warmup and --profile-steps marked steps: it measures no timed steps
    "profile": (*DISTRIBUTED_FIELDS, "iters", "ci_target", "max_iters", "max_time_s"),
    "distributed": ("ci_target", "max_iters", "max_time_s"),  # iters=auto is refused there
    "sweep": ("model", "batch_size", "precision"),  # axes: --models, --batch-sizes, --precisions
}
# Defaults an entry point sets on purpose, unlike the dataclass's.
OWN_DEFAULTS = {
    "profile": {"device": "cuda"},  # ncu profiles CUDA kernels
    "distributed": {"distributed": "ddp"},  # the point of the entry
}


def mlflow_run(
    tracking: str, tmp_path, *params: str, entry: str = "main"
) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=tracking,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    env.pop("MLFLOW_RUN_ID", None)
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "run",
        str(ROOT),
        "--env-manager",
        "local",
        "--experiment-name",
        "mlproject-test",
        "-e",
        entry,
    ]
    for p in params:
        args += ["-P", p]
    return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_mlflow_run_local_env_manager(tracking, tmp_path):
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=2",
        "image_size=32",
        "iters=3",
        "warmup_iters=1",
        "device=cpu",
        "env_label=ci-box",
        "channels_last=true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["batch"] == "2"  # logged by mlflow run from -P
    assert run.data.params["batch_size"] == "2" and run.data.params["channels_last"] == "true"
    assert run.data.tags["env_label"] == "ci-box" and run.data.tags["run_kind"] == "train"
    assert run.data.metrics["throughput_samples_per_s"] > 0
    assert "samples/s" in done.stdout


def test_mlflow_run_with_bad_parameter_ends_failed_with_reason(tracking, tmp_path):
    done = mlflow_run(tracking, tmp_path, "batch=two", "device=cpu")
    assert done.returncode != 0
    assert "error: argument --batch/--batch-size: invalid int value: 'two'" in done.stderr
    run = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")[0]
    assert run.info.status == "FAILED" and "invalid int value: 'two'" in run.data.tags["error"]


def test_mlflow_run_profile_entry_imports_ncu_output(tracking, tmp_path, ncu_dir):
    csv = ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv"
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=64",
        "image_size=32",
        f"import_file={csv}",
        "device_name=NVIDIA L4",
        "env_label=lab",
        entry="profile",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")[0]
    assert run.info.status == "FINISHED" and run.data.tags["run_kind"] == "profile"
    assert run.data.tags["device_name"] == "NVIDIA L4"
    assert abs(run.data.metrics["ncu_intensity_dram_flops_per_byte"] - 6.94) < 0.007


def test_mlflow_run_breakdown_entry(tracking, tmp_path):
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=2",
        "image_size=32",
        "iters=1",
        "warmup_iters=0",
        "device=cpu",
        "num_classes=10",
        "env_label=ci-box",
        entry="breakdown",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.tags["run_kind"] == "breakdown"
    assert run.data.params["batch"] == "2" and run.data.params["batch_size"] == "2"
    assert run.data.tags["mlflow.project.entryPoint"] == "breakdown"
    assert run.data.metrics["breakdown_step_s"] > 0 and "; largest, shares by " in done.stdout


@pytest.mark.skipif(
    os.environ.get("ROOFLINE_TEST_VIRTUALENV") != "1",
    reason="builds a 6 GB venv from conda.yaml (minutes): set ROOFLINE_TEST_VIRTUALENV=1 (.ci/run does)",
)
def test_mlflow_run_virtualenv_env_manager(tracking, tmp_path):
    """The conda.yaml pip list builds a working environment with mlflow's virtualenv manager."""
    import shutil

    if shutil.which("pyenv") is None and not os.path.exists(
        os.path.expanduser("~/.pyenv/bin/pyenv")
    ):
        pytest.skip("mlflow's virtualenv manager needs pyenv")
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=tracking,
        PATH=os.pathsep.join(
            [
                os.path.dirname(sys.executable),
                os.path.expanduser("~/.pyenv/bin"),
                os.environ.get("PATH", ""),
            ]
        ),
    )
    env.pop("MLFLOW_RUN_ID", None)
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "run",
        str(ROOT),
        "--env-manager",
        "virtualenv",
        "--experiment-name",
        "venv-test",
        "-P",
        "batch=2",
        "-P",
        "image_size=32",
        "-P",
        "iters=2",
        "-P",
        "warmup_iters=1",
        "-P",
        "device=cpu",
    ]
    done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = mlflow.search_runs(experiment_names=["venv-test"], output_format="list")[0]
    assert run.info.status == "FINISHED" and run.data.metrics["throughput_samples_per_s"] > 0


def entry_point(name: str) -> dict:
    return yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"][name]


def parsed_defaults(name: str, module: str | None = None):
    """The entry point's command with every parameter at its MLproject default (quoted as mlflow
    quotes it), parsed by the parser of the command it runs."""
    ep = entry_point(name)
    values = {k: shlex.quote(str(v["default"])) for k, v in ep["parameters"].items()}
    argv = shlex.split(ep["command"].format(**values))
    if " -m train " in ep["command"]:  # torchrun's flags, then python -m train's
        argv = argv[argv.index("train", argv.index("-m")) + 1 :]
    else:
        argv = [a for a in argv[3:] if a != "--breakdown"]  # python -m <module> [--breakdown]
    return importlib.import_module(module or CONFIG_ENTRIES[name]).build_parser().parse_args(argv)


@pytest.mark.parametrize("name", sorted(CONFIG_ENTRIES))
def test_every_config_field_is_a_parameter_of_the_entry_point(name):
    """A TrainConfig field (with a flag) that an entry point does not pass, on purpose or not."""
    ep = entry_point(name)
    missing = []
    for f in flag_fields(TrainConfig):
        if f.name in NOT_PASSED[name]:
            continue
        flag = flag_names(f)[0]
        param = flag[2:].replace("-", "_")
        if param not in ep["parameters"] or f"{flag} {{{param}}}" not in ep["command"]:
            missing.append(f"{f.name} (-P {param}, {flag} {{{param}}})")
    assert not missing, f"MLproject entry {name} lacks: {', '.join(missing)}"


@pytest.mark.parametrize("name", ["main", "distributed", "profile"])
def test_entry_point_defaults_are_the_dataclass_defaults(name):
    """`mlflow run -e <name>` without -P measures TrainConfig() (but for OWN_DEFAULTS)."""
    got = asdict(config_from_args(parsed_defaults(name)))
    want = {**asdict(TrainConfig()), **OWN_DEFAULTS.get(name, {})}
    differ = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not differ, f"MLproject entry {name}: (given, dataclass) {differ}"


# Every other entry point: the module whose parser reads its command, and the config it builds.
OTHER_ENTRIES = {
    "breakdown": ("profiling.breakdown.cli", "BreakdownCommand"),
    "peaks": ("profiling.peaks.__main__", "PeaksConfig"),
    "complexity": ("train.complexity.__main__", "ComplexityConfig"),
    "analyze": ("analysis.app", "AnalysisConfig"),
    "gate": ("analysis.gate", "GateConfig"),
}


@pytest.mark.parametrize("name", sorted(OTHER_ENTRIES))
def test_other_entry_points_build_their_config_from_their_defaults(name):
    """`mlflow run -e <name>` without -P parses and gives a valid config (for breakdown, also
    TrainConfig() with its own number of steps)."""
    module, cls = OTHER_ENTRIES[name]
    args = parsed_defaults(name, module)
    flags.build(getattr(importlib.import_module(module), cls), args)
    if name == "breakdown":
        got = asdict(config_from_args(args))
        assert got == {**asdict(TrainConfig()), "iters": 3}


def test_whatif_entry_point_passes_its_run_and_defaults():
    """`mlflow run -e whatif -P run_id=...`: the run id is the command's RUN_ID, and the other
    parameters' defaults are WhatifCommand's (empty moves: every move)."""
    from train.whatif.__main__ import WhatifCommand, build_parser

    ep = entry_point("whatif")
    values = {k: shlex.quote(str(v.get("default", "abc123"))) for k, v in ep["parameters"].items()}
    args = build_parser().parse_args(shlex.split(ep["command"].format(**values))[3:])
    assert args.run_id == "abc123"
    assert flags.build(WhatifCommand, args) == WhatifCommand(no_progress=True)


def test_sweep_entry_point_defaults_give_no_config_flag():
    """The sweep's empty parameters are "not given": the sweep file's base or TrainConfig decides."""
    args = parsed_defaults("sweep")
    given = {f.name: getattr(args, f.name) for f in flag_fields(TrainConfig)}
    assert given == dict.fromkeys(given)


def test_the_config_test_sees_a_wrong_default_and_a_missing_parameter(monkeypatch):
    """The two tests above fail on an MLproject whose default differs or that lacks a field."""
    text = (ROOT / "MLproject").read_text()
    wrong = text.replace(
        'lr: {type: string, default: "0.01"}', 'lr: {type: string, default: "0.1"}', 1
    )
    lacking = text.replace(" --seed {seed}", "", 1)
    assert wrong != text and lacking != text
    for changed, test, args in (
        (wrong, test_entry_point_defaults_are_the_dataclass_defaults, ("main",)),
        (lacking, test_every_config_field_is_a_parameter_of_the_entry_point, ("main",)),
    ):
        monkeypatch.setattr(
            sys.modules[__name__],
            "entry_point",
            lambda n, t=changed: yaml.safe_load(t)["entry_points"][n],
        )
        with pytest.raises(AssertionError, match="MLproject entry main"):
            test(*args)
