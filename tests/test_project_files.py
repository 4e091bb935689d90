"""The MLproject, conda.yaml and requirements.txt agree with each other and with the CLIs."""

from __future__ import annotations

import re

import yaml

from tests.conftest import ROOT


def requirement_lines() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def test_conda_yaml_pip_section_equals_requirements_txt():
    env = yaml.safe_load((ROOT / "conda.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == requirement_lines()
    assert (
        "python=3.11.7" in env["dependencies"]
    )  # a full version: mlflow asks pyenv for it; "3.11" makes it look up and download the newest 3.11.x


def test_torch_pins():
    reqs = requirement_lines()
    assert "torch==2.14.1" in reqs and "torchvision==0.29.1" in reqs


def entry_points() -> dict:
    return yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]


def test_every_parameter_is_used_once_and_every_flag_exists():
    import importlib

    modules = {
        "main": "train.__main__",
        "profile": "profiling.cli",
        "sweep": "train.sweep.__main__",
        "peaks": "profiling.peaks.__main__",
        "complexity": "train.complexity.__main__",
        "analyze": "analysis.app",
        "gate": "analysis.gate",
        "distributed": "train.__main__",
        "breakdown": "profiling.breakdown.cli",
        "whatif": "train.whatif.__main__",
    }
    for name, ep in entry_points().items():
        command = ep["command"]
        used = re.findall(r"\{(\w+)\}", command)
        assert sorted(used) == sorted(ep.get("parameters", {})), name
        launcher = ""
        if command.startswith("python -m torch.distributed.run "):  # torchrun's flags, then train's
            launcher, _, command = command.partition(" -m train ")
        flags = re.findall(r"(--[\w-]+) \{", command)
        parser = importlib.import_module(modules[name]).build_parser()  # every entry point has one
        known = {opt for action in parser._actions for opt in action.option_strings}
        assert set(flags) <= known, (name, set(flags) - known)
        if launcher:
            flags = re.findall(r"(--[\w-]+)", launcher)
            known = {opt for action in torch_run_parser()._actions for opt in action.option_strings}
            assert set(flags) <= known, (name, set(flags) - known)


def torch_run_parser():
    from torch.distributed.run import get_args_parser

    return get_args_parser()


def test_distributed_entry_point_is_torchrun_around_train():
    ep = entry_points()["distributed"]
    command = " ".join(ep["command"].split())
    assert command.startswith(
        "python -m torch.distributed.run --standalone --nproc-per-node {nproc_per_node} -m train "
        "--distributed {distributed}"
    )
    # the main entry point stays single-process: its parameters did not change
    assert "distributed" not in entry_points()["main"]["parameters"]
