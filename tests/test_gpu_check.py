"""The GPU check (gpu_check/check.py, issue 34): its CPU form end to end, as CI runs it, and the
parts a GPU day depends on: files after every step, a step past its limit, the deadline, the
bundle's size cap, the capture's checks, the second call's sizing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_check import check as gpu_check
from gpu_check import steps as gpu_check_steps
from tests.conftest import ROOT


def _files(out: Path) -> dict[str, Path]:
    return {p.name: p for p in out.iterdir()}


def test_the_cpu_rehearsal_runs_every_step_it_can_and_returns_at_most_8_files(tmp_path):
    """`python -m gpu_check --device cpu --tiny --out DIR`: exit 0, the files parse, the
    NVIDIA-only steps are skipped naming why, the others ran and measured."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ROOFLINE_"))}
    argv = [sys.executable, "-m", "gpu_check", "--device", "cpu", "--tiny"]
    argv += ["--out", str(out), "--root", str(tmp_path / "root"), "--deadline-s", "900"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    files = _files(out)
    assert len(files) <= 8 and {"log.txt", "ratios.json", "steps.json", "bundle.tar.gz"} <= set(
        files
    )
    assert not [n for n in files if n.startswith(".")]  # no half-written file left behind
    steps = {s["name"]: s for s in json.loads(files["steps.json"].read_text())["steps"]}
    assert list(steps) == list(gpu_check.STEPS)
    for name in ("capture", "energy"):
        assert steps[name]["status"] == "skipped"
        assert "needs an NVIDIA GPU" in steps[name]["reason"]
    ran = [s for s in steps.values() if s["status"] != "skipped"]
    assert {s["status"] for s in ran} == {"ok"}, ran
    ratios = json.loads(files["ratios.json"].read_text())
    assert all(isinstance(v, float) for v in ratios.values())
    for name in (
        "resnet18_b2_fp32",
        "resnet18_b2_fp32_cl",
        "resnet18_b2_bf16",
        "resnet18_b2_bf16_cl",
    ):
        assert ratios[f"train_to_bare_{name}"] > 0
    assert ratios["breakdown_flops_to_train_flops"] == pytest.approx(1, rel=1e-6)
    log = files["log.txt"].read_text()
    assert "capture            skipped" in log and "train_to_bare_resnet18_b2_fp32 = " in log
    assert files["report.html"].read_text().lstrip().lower().startswith("<!doctype html")
    with tarfile.open(files["bundle.tar.gz"]) as tar:
        names = set(tar.getnames())
    assert {"mlflow.db", "versions.txt", "logs/train.txt", "report/report.html"} <= names
    assert any(n.startswith("mlruns/") for n in names)  # the artifacts are under the root too


def _check(tmp_path, *flags) -> gpu_check.Check:
    args = gpu_check.parse(["--out", str(tmp_path / "out"), "--root", str(tmp_path / "r"), *flags])
    return gpu_check.Check(args)


def test_a_step_past_its_limit_fails_and_the_next_steps_still_run(tmp_path, monkeypatch):
    """versions imports torch (seconds): with a 0.5 s limit it is stopped; the files are written
    after it, and the setup step after it runs."""
    monkeypatch.setitem(gpu_check.LIMITS_S, "versions", 0.5)
    check = _check(tmp_path, "--device", "cpu", "--only", "versions,setup")
    assert check.run(["versions", "setup"]) == 1
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert steps[0]["name"] == "versions" and steps[0]["status"] == "failed"
    assert steps[0]["reason"].startswith("ran past its 0.5 s limit")
    assert steps[1]["name"] == "setup" and steps[1]["status"] == "ok"
    assert "versions           failed" in (tmp_path / "out" / "log.txt").read_text()


def test_steps_the_deadline_leaves_no_time_for_are_not_run(tmp_path):
    check = _check(tmp_path, "--device", "cpu", "--deadline-s", "20")
    assert check.run(["peaks", "train"]) == 1
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["not run", "not run"]
    assert steps[0]["reason"] == "the deadline (20 s) left 5 s"
    assert len(_files(tmp_path / "out")) <= 8


def test_capture_steps_without_ncu_are_skipped_on_cuda_and_cpu(tmp_path, monkeypatch):
    check = _check(tmp_path, "--device", "cuda")
    check.ncu = None
    assert check.skip_reason("capture").startswith("ncu not found (PATH, /usr/local/cuda*/bin/ncu")
    assert check.skip_reason("energy") is None and check.skip_reason("train") is None
    check.close()  # its folders' locks: the next check takes the same folders
    check = _check(tmp_path, "--device", "cpu")
    assert check.skip_reason("energy") == (
        "NVML energy needs an NVIDIA GPU; this check runs on --device cpu"
    )


def test_the_bundle_leaves_out_the_largest_files_to_fit(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "versions.txt").write_text("kept\n")
    (root / "mlflow.db").write_bytes(os.urandom(300_000))
    (root / "site").mkdir()
    (root / "site" / "wheel.py").write_text("installed wheels never travel back\n")
    monkeypatch.setattr(gpu_check, "BUNDLE_MAX_BYTES", 100_000)
    data = gpu_check.bundle(root)
    assert len(data) <= 100_000
    path = tmp_path / "b.tar.gz"
    path.write_bytes(data)
    with tarfile.open(path) as tar:
        assert set(tar.getnames()) == {"logs/versions.txt", "LEFT_OUT.txt"}
        left = tar.extractfile("LEFT_OUT.txt").read().decode()
    assert left == "mlflow.db (300000 bytes)\n"


def test_only_unknown_step_is_refused():
    with pytest.raises(gpu_check.Refused, match="unknown step"):
        gpu_check.step_names("capture-resnet51")
    assert gpu_check.step_names("capture-resnet50") == ["setup", "capture-resnet50"]
    assert gpu_check.step_names("versions") == ["versions"]


def test_ratios_read_back_keep_only_finite_numbers():
    got = gpu_check.finite({"a": 1.5, "b": float("nan"), "c": "2", "d": True, "e": 3})
    assert got == {"a": 1.5, "e": 3.0}


def _run(metrics: dict, tags: dict | None = None):
    return SimpleNamespace(
        data=SimpleNamespace(metrics=metrics, tags=tags or {"ncu_missing": "none"})
    )


GOOD = {
    "ncu_kernels": 120.0,
    "ncu_flops_to_counted_ratio": 1.03,
    "ncu_phase_forward_kernels": 40.0,
    "ncu_phase_backward_kernels": 70.0,
    "ncu_phase_forward_flops_to_counted_ratio": 1.01,
    "ncu_phase_backward_flops_to_counted_ratio": 1.04,
}


def test_a_good_capture_passes_and_gives_kernels_per_second(tmp_path):
    result = gpu_check_steps.Result(tmp_path, "capture")
    gpu_check_steps.check_capture(_run(GOOD), 60.0, result, "capture")
    assert result.problems == []
    assert result.facts["capture_kernels_per_s"] == 2.0
    assert result.ratios == {
        "capture_flops_to_counted": 1.03,
        "capture_forward_flops_to_counted": 1.01,
        "capture_backward_flops_to_counted": 1.04,
    }


@pytest.mark.parametrize(
    "change, tags, problem",
    [
        ({"ncu_flops_to_counted_ratio": 0.90}, None, "captured FLOPs per step / counted = 0.9"),
        ({"ncu_phase_backward_kernels": 0.0}, None, "no backward kernels in the capture"),
        (
            {},
            {"ncu_missing": "dram_bytes"},
            "quantities without counters in the capture: dram_bytes",
        ),
    ],
)
def test_a_capture_off_by_more_than_5_percent_or_without_backward_fails(
    tmp_path, change, tags, problem
):
    result = gpu_check_steps.Result(tmp_path, "capture")
    gpu_check_steps.check_capture(_run({**GOOD, **change}, tags), 60.0, result, "capture")
    assert any(p.startswith(problem) for p in result.problems), result.problems


def test_the_second_call_reads_kernels_per_second_from_the_first(tmp_path):
    steps = {
        "steps": [
            {"name": "capture", "facts": {"capture_kernels_per_s": 2.5, "capture_kernels": 300}}
        ]
    }
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    assert gpu_check_steps.prior_kernels_per_s(str(tmp_path)) == 2.5
    assert gpu_check_steps.prior_kernels(str(tmp_path), 1.0) == 300
    assert gpu_check_steps.prior_kernels_per_s(str(tmp_path / "missing")) is None


# ------------------------------------------------------------------ the GPU-only steps' plumbing
def _gpu_args(**kw):
    return SimpleNamespace(
        tiny=False, device="cuda", limit_s=150, kernels_per_s=None, prior=None, **kw
    )


@pytest.fixture
def standin_capture(tracking, tmp_path, monkeypatch):
    """The capture step on a stand-in GPU (an L4) with the stand-in ncu of test_profiling_cli."""
    from profiling import cli
    from profiling.ncu.gpu import GpuInfo
    from tests.test_profiling_cli import STANDIN

    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "ncu"
    exe.write_text(STANDIN.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("GPU_CHECK_NCU", str(exe))
    monkeypatch.setenv("STANDIN_ARGV", str(tmp_path / "argv.json"))
    info = GpuInfo(True, "NVIDIA L4", (8, 9), {"driver_version": "555.42"})
    monkeypatch.setattr(cli, "cuda_probe", lambda device, env_label=None: info)
    (tmp_path / "results").mkdir()

    def run(output: Path | None, rc: int = 0, stderr: str = "") -> gpu_check_steps.Result:
        monkeypatch.setenv("STANDIN_OUTPUT", str(output or ""))
        monkeypatch.setenv("STANDIN_RC", str(rc))
        monkeypatch.setenv("STANDIN_STDERR", stderr)
        result = gpu_check_steps.Result(tmp_path, "capture")
        gpu_check_steps.step_capture(_gpu_args(), tmp_path, result)
        return result

    return run


def test_the_capture_step_runs_ncu_as_planned_and_fails_with_its_reason(standin_capture, tmp_path):
    from profiling.ncu.messages import PERM_MESSAGE

    perm = (ROOT / "tests" / "data" / "ncu_messages" / "err_nvgpuctrperm.log").read_text()
    result = standin_capture(None, rc=1, stderr=perm.splitlines()[1])
    assert result.problems == [f"python -m profiling exited 1: {PERM_MESSAGE}"]
    argv = json.loads((tmp_path / "argv.json").read_text())
    child = argv[argv.index("--nvtx") :]
    assert "--timeout-s" not in argv  # a profiling flag, not an ncu one
    program = argv[argv.index(sys.executable) :]
    assert program[:3] == [sys.executable, "-m", "profiling.breakdown.nvtx_steps"]
    flags = dict(zip(program[3::2], program[4::2]))
    assert flags["--model"] == "resnet18" and flags["--precision"] == "bf16" and child


def test_a_partial_capture_of_another_config_fails_the_checks(standin_capture, ncu_dir):
    """The recorded L4 capture (resnet18 b64, part of a step, fp32 and DRAM counters only) is far
    from the counted training FLOPs of resnet18 b32 bf16, and lacks counters the plan asks for."""
    result = standin_capture(ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv")
    assert result.facts["capture_kernels"] > 0 and result.facts["capture_kernels_per_s"] > 0
    assert result.facts["capture_ncu_version"] == "Version 0.0.0.0 (stand-in for tests)"
    assert result.problems[0] == (
        "quantities without counters in the capture: flops_fp64,flops_fp16,flops_tensor,l2_bytes,l1_bytes"
    )
    assert result.problems[1].startswith("captured FLOPs per step / counted = 0.0144")
    assert result.problems[1].endswith(": not within 5%")


def test_the_energy_steps_flags_make_a_valid_train_config():
    from train.__main__ import build_parser
    from train.config import config_from_args

    s = gpu_check.sizes(False, "cuda")
    model, batch, precision, seconds = s["energy"]
    argv = gpu_check_steps.config_argv(s, model, batch, precision, False, "cuda")
    argv = argv[: argv.index("--iters")] + ["--iters", "auto", "--ci-target", "1e-9"]
    argv += ["--max-iters", "1000000", "--max-time-s", str(seconds)]
    cfg = config_from_args(build_parser().parse_args(argv))
    assert cfg.model == "resnet50" and cfg.batch_size == 256 and cfg.max_time_s == 12.0


def test_sigterm_stops_the_running_step_and_still_writes_the_files(tmp_path):
    """A job runner's `timeout` sends SIGTERM: the step's process group is stopped, steps.json
    says so, exit 143 (128 + 15) and one line on stderr."""
    import signal
    import time

    out = tmp_path / "out"
    argv = [sys.executable, "-m", "gpu_check", "--device", "cpu", "--only", "versions"]
    argv += ["--out", str(out), "--root", str(tmp_path / "root")]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "root" / "logs" / "versions.txt").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert proc.stderr.read().decode().splitlines() == [
        "gpu check: stopped by SIGTERM after 0 step(s)"
    ]
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert steps[-1] == {
        "name": "interrupted",
        "status": "failed",
        "reason": "stopped by SIGTERM",
        "seconds": 0.0,
    }


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of one module `name` (what pip needs: WHEEL, METADATA, RECORD)."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"__version__ = '{version}'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


def test_setup_installs_the_carried_wheels_when_mlflow_is_missing(tmp_path, monkeypatch):
    """The GPU machine has no mlflow: setup installs .device-wheels/*.whl into ROOT/site with pip
    (no index, no deps) and the steps then find them on PYTHONPATH."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "gpucheck_carried", "1.2.3")
    monkeypatch.setattr(gpu_check, "WHEELS", wheels)
    monkeypatch.setattr(gpu_check, "IMPORTS", (("gpucheck_carried", "gpucheck_carried"),))
    check = _check(tmp_path, "--device", "cpu")
    real = check.imports
    # as on the GPU machine: mlflow not found before the install; then what the children find
    calls = []

    def imports(limit):
        calls.append(limit)
        return {} if len(calls) == 1 else {**real(limit), "mlflow": "3.17.2"}

    monkeypatch.setattr(check, "imports", imports)
    status, reason, facts = check.setup(60)
    assert (status, reason) == ("ok", f"installed 1 wheels into {tmp_path / 'r' / 'site'}")
    assert (tmp_path / "r" / "site" / "gpucheck_carried.py").is_file()
    assert facts["imports"]["gpucheck_carried"] == "1.2.3"  # found through PYTHONPATH=ROOT/site


def test_setup_without_mlflow_or_wheels_fails_saying_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "WHEELS", tmp_path / "none")
    check = _check(tmp_path, "--device", "cpu")
    monkeypatch.setattr(check, "imports", lambda limit: {})
    status, reason, _ = check.setup(60)
    assert status == "failed" and reason.startswith(
        "mlflow is not importable and .device-wheels/ has no wheels: run `make device-wheels`"
    )


def test_without_pip_the_wheels_are_unzipped_as_pip_would(tmp_path):
    """Every carried wheel unzipped: its modules at the top of site, the .data scripts left out
    (ninja's wheel has them), importable from there."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    whl = _wheel(wheels, "gpucheck_zip", "0.1")
    import zipfile

    with zipfile.ZipFile(whl, "a") as z:
        z.writestr("gpucheck_zip-0.1.data/purelib/gpucheck_zip_extra.py", "X = 1\n")
        z.writestr("gpucheck_zip-0.1.data/scripts/tool", "#!/bin/sh\n")
    site = tmp_path / "site"
    gpu_check.unzip_wheels([whl], site)
    found = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert found == [
        "gpucheck_zip-0.1.dist-info/METADATA",
        "gpucheck_zip-0.1.dist-info/RECORD",
        "gpucheck_zip-0.1.dist-info/WHEEL",
        "gpucheck_zip.py",
        "gpucheck_zip_extra.py",
    ]
    code = "import gpucheck_zip, gpucheck_zip_extra; print(gpucheck_zip.__version__)"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout == "0.1\n"
