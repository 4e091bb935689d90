"""The steps of the GPU check (gpu_check/check.py), each run as `python -m gpu_check.steps
--child NAME --root ROOT --device D [--tiny]` in a process of its own, with the project importable and the
tracking store under ROOT. Each writes ROOT/results/NAME.json: {"status": ok | failed, "reason",
"ratios": {name: number}, "facts": {name: value}}, rewritten as it goes (the train matrix after
every config), so a step stopped at its time limit still leaves what it measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from gpu_check.check import CAPTURE_TOLERANCE, EXPERIMENT, STOP_GRACE_S, find_ncu, parse, sizes
from gpu_check.children import end_group_if_orphaned, watch_parent

INTERRUPTED = {129: "SIGHUP", 130: "SIGINT", 143: "SIGTERM"}
"""the exit codes of a project command stopped by a signal (common.cli: 128 + its number)"""


class Result:
    """What a step found; `save()` writes it to ROOT/results/<name>.json."""

    def __init__(self, root: Path, name: str) -> None:
        self.path = root / "results" / f"{name}.json"
        self.ratios: dict[str, float] = {}
        self.facts: dict = {}
        self.problems: list[str] = []

    def save(self, done: bool = False) -> None:
        status = "failed" if self.problems or not done else "ok"
        reason = "; ".join(self.problems) if self.problems else ("" if done else "stopped early")
        body = {"status": status, "reason": reason, "ratios": self.ratios, "facts": self.facts}
        self.path.write_text(json.dumps(body, indent=1, default=str) + "\n")


def run_child(args) -> int:
    """One step; 130 when a signal stopped it (the check's SIGINT, or the check's death: then what
    is left of this process group goes too, gpu_check/children.py)."""
    parent = os.getppid()
    watch_parent(parent, STOP_GRACE_S)
    try:
        return _run_step(args)
    finally:
        end_group_if_orphaned(parent)


def _run_step(args) -> int:
    root = Path(args.root)
    result = Result(root, args.child)
    result.save()
    try:
        STEP_FUNCTIONS[args.child](args, root, result)
    except KeyboardInterrupt as exc:  # the step stops at once: no further config starts
        result.problems.append(f"stopped ({exc})" if str(exc) else "stopped by SIGINT")
        result.save()
        print(f"gpu check step {args.child}: {result.problems[-1]}", flush=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug or a torch the project does not know: record it
        import traceback

        traceback.print_exc()
        result.problems.append(
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
    result.save(done=True)
    return 0 if not result.problems else 1


def main(argv: list[str] | None = None) -> int:
    return run_child(parse(argv))


# ------------------------------------------------------------------------------ helpers
def latest_run(kind: str):
    """The newest run of `kind` (run_kind tag) in the check's experiment, or None."""
    import mlflow

    runs = mlflow.search_runs(
        experiment_names=[EXPERIMENT],
        filter_string=f"tags.run_kind = '{kind}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return runs[0] if runs else None


def quiet_main(fn, argv: list[str]) -> int:
    """A project CLI's exit code (SystemExit from argparse included); KeyboardInterrupt when a
    signal stopped it (exit 129, 130 or 143), so that the step stops there."""
    print("$ " + " ".join(argv), flush=True)
    try:
        rc = int(fn(argv) or 0)
    except SystemExit as exc:
        rc = int(exc.code or 0) if isinstance(exc.code, int) else 2
    if rc in INTERRUPTED:
        raise KeyboardInterrupt(f"{INTERRUPTED[rc]} during: {' '.join(argv[:4])} ...")
    return rc


def label(model: str, batch: int, precision: str, channels_last: bool) -> str:
    return f"{model}_b{batch}_{precision}" + ("_cl" if channels_last else "")


# ------------------------------------------------------------------------------ versions
def step_versions(args, root: Path, result: Result) -> None:
    """nvidia-smi, the driver, ncu, torch, CUDA, cuDNN: into ROOT/versions.txt and the facts."""
    import torch

    f = result.facts
    f["python"] = platform.python_version()
    f["platform"] = platform.platform()
    f["torch"] = torch.__version__
    f["torch_cuda"] = torch.version.cuda or "none"
    f["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "none"
    f["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        f["device_name"] = torch.cuda.get_device_name(0)
        f["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    ncu = os.environ.get("GPU_CHECK_NCU") or find_ncu()
    f["ncu"] = ncu or "not found"
    texts = [f"{k}: {v}" for k, v in f.items()]
    smi = command_text(["nvidia-smi", "-q"], 40)
    texts += ["", "$ nvidia-smi -q | head -40", smi]
    query = "name,driver_version,memory.total,power.limit,clocks.max.sm"
    texts += ["", f"$ nvidia-smi --query-gpu={query}"]
    texts.append(command_text(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], 10))
    if ncu:
        version = command_text([ncu, "--version"], 10)
        f["ncu_version"] = version.strip().splitlines()[-1] if version.strip() else "unknown"
        texts += ["", "$ ncu --version", version]
    (root / "versions.txt").write_text("\n".join(texts) + "\n")
    if args.device == "cuda" and not torch.cuda.is_available():
        result.problems.append("--device cuda but torch.cuda.is_available() is False")


def command_text(argv: list[str], head: int) -> str:
    """The first `head` lines of a command's output, or why there are none."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({argv[0]}: {exc})"
    return "\n".join((done.stdout + done.stderr).splitlines()[:head])


# ------------------------------------------------------------------------------ peaks
def step_peaks(args, root: Path, result: Result) -> None:
    """profiling.peaks on the device; each ceiling over the datasheet's (roofline.vendor)."""
    from profiling.peaks.__main__ import main as peaks_main
    from roofline.vendor import find

    argv = ["--device", args.device, "--experiment", EXPERIMENT]
    if args.tiny:
        argv += ["--dtypes", "fp32", "--matrix-size", "128", "--bandwidth-mib", "4"]
        argv += ["--repeats", "2", "--bandwidth-repeats", "2", "--time-budget-s", "2"]
    else:
        argv += ["--time-budget-s", str(max(10, int(args.limit_s) - 25))]
    rc = quiet_main(peaks_main, argv)
    run = latest_run("peaks")
    if rc != 0 or run is None:
        result.problems.append(f"python -m profiling.peaks exited {rc}")
        return
    m, name = run.data.metrics, run.data.tags.get("device_name", "")
    peaks = {k: v for k, v in m.items() if k.startswith("peak_") and k.endswith("_per_s")}
    result.facts.update(peaks)
    result.facts["device_name"] = name
    vendor = find(name)
    if vendor is None:
        result.facts["datasheet"] = f"none known for {name!r}: no ratios to the datasheet"
        return
    result.facts["datasheet"] = vendor.source
    for dtype, flops in vendor.flops_per_s.items():
        if f"peak_flops_per_s_{dtype}" in m:
            result.ratios[f"peak_{dtype}_to_datasheet"] = m[f"peak_flops_per_s_{dtype}"] / flops
    if "peak_dram_bytes_per_s" in m:
        result.ratios["peak_dram_to_datasheet"] = (
            m["peak_dram_bytes_per_s"] / vendor.dram_bytes_per_s
        )


# ------------------------------------------------------------------------------ train vs bare
def train_matrix(args) -> list[tuple]:
    s = sizes(args.tiny, args.device)
    return [
        (s["model"], b, p, cl)
        for b in s["batches"]
        for p in s["precisions"]
        for cl in (False, True)
    ]


def step_train(args, root: Path, result: Result) -> None:
    """Every config through `python -m train` (in this process) and through a bare PyTorch loop
    right after it: train_to_bare_<config> = the project's samples/s over the bare loop's; then
    channels_last, tf32 and bf16 gains from the train runs."""
    from train.__main__ import main as train_main

    s = sizes(args.tiny, args.device)
    throughput: dict[tuple, float] = {}
    for model, batch, precision, cl in train_matrix(args):
        name = label(model, batch, precision, cl)
        argv = config_argv(s, model, batch, precision, cl, args.device)
        rc = quiet_main(train_main, [*argv, "--experiment", EXPERIMENT, "--no-progress"])
        run = latest_run("train")
        if rc != 0 or run is None or run.data.params.get("batch_size") != str(batch):
            result.problems.append(f"train {name} exited {rc}")
            result.save()
            continue
        ours = run.data.metrics["throughput_samples_per_s"]
        bare = bare_loop(model, batch, precision, cl, s, args.device)
        throughput[(batch, precision, cl)] = ours
        result.facts[f"train_samples_per_s_{name}"] = round(ours, 3)
        result.facts[f"bare_samples_per_s_{name}"] = round(bare, 3)
        result.ratios[f"train_to_bare_{name}"] = ours / bare
        result.save()
        release_memory()
    gains(throughput, s["model"], result)


def release_memory() -> None:
    """Give the cached device memory of the config just run back, so the next train run's memory
    check (free memory) sees the whole GPU, as a fresh process would."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def config_argv(s: dict, model: str, batch: int, precision: str, cl: bool, device: str) -> list:
    return [
        "--model", model, "--batch", str(batch), "--precision", precision,
        "--channels-last", str(cl).lower(), "--image-size", str(s["image_size"]),
        "--num-classes", str(s["num_classes"]), "--device", device,
        "--warmup-iters", str(s["warmup"]), "--iters", str(s["iters"]),
    ]  # fmt: skip


def gains(throughput: dict, model: str, result: Result) -> None:
    """channels_last over contiguous, and tf32 and bf16 over fp32, per batch (train runs)."""
    for (batch, precision, cl), v in throughput.items():
        base = throughput.get((batch, precision, False))
        if cl and base:
            result.ratios[f"channels_last_gain_{model}_b{batch}_{precision}"] = v / base
        fp32 = throughput.get((batch, "fp32", cl))
        if precision != "fp32" and fp32:
            suffix = "_cl" if cl else ""
            result.ratios[f"{precision}_to_fp32_{model}_b{batch}{suffix}"] = v / fp32


def bare_loop(model: str, batch: int, precision: str, cl: bool, s: dict, device: str) -> float:
    """Samples per second of the plainest PyTorch loop of the same config: torchvision model, SGD
    (momentum 0.9), synthetic resident batch, autocast for bf16, TF32 flags for tf32, cuDNN
    autotuning on CUDA; the same warmup and measured steps as the train run."""
    import torch
    import torch.nn.functional as F
    import torchvision

    dev = torch.device(device)
    torch.manual_seed(0)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    net = torchvision.models.get_model(model, num_classes=s["num_classes"]).to(dev).train()
    fmt = torch.channels_last if cl else torch.contiguous_format
    net = net.to(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, s["image_size"], s["image_size"], device=dev)
    x = x.contiguous(memory_format=fmt)
    y = torch.randint(0, s["num_classes"], (batch,), device=dev)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16) if precision == "bf16" else None

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp or contextlib.nullcontext():
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(s["warmup"] + 1):  # +1: the optimizer's state, as the train run's first step
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(s["iters"]):
        step()
    sync()
    return batch * s["iters"] / (time.perf_counter() - t0)


# ------------------------------------------------------------------------------ capture
def step_capture(args, root: Path, result: Result) -> None:
    """ncu with module ranges of a small config; checks exit 0, every counter accepted, forward
    and backward present, captured FLOPs within 5 % of the counted; wall time, kernels/s."""
    model, batch, precision = sizes(args.tiny, args.device)["capture"]
    capture(args, root, result, model, batch, precision, "capture")


def step_capture_resnet50(args, root: Path, result: Result) -> None:
    """The second call: resnet50 b64 bf16 under ncu, its limit sized from kernels per second."""
    model, batch, precision = sizes(args.tiny, args.device)["capture50"]
    kps = args.kernels_per_s or prior_kernels_per_s(args.prior)
    if kps:
        # resnet50 launches about 2.7x resnet18's kernels per step (161 vs 60 convolutions and
        # their batch norms, forward and backward); each kernel replays about as often
        estimate = 2.7 * prior_kernels(args.prior, 600 / 2.7) / kps
        result.facts["estimated_capture_s"] = round(estimate, 1)
        result.facts["capture_timeout_s"] = max(5, int(args.limit_s) - 40)
        print(f"estimated capture: {estimate:.0f} s at {kps:.2f} kernels/s", flush=True)
        if estimate > args.limit_s - 40:
            print(
                f"warning: the estimate is over this call's {args.limit_s - 40:.0f} s for ncu: "
                "it will be stopped there with what it has (give --deadline-s up to 590)",
                flush=True,
            )
    capture(args, root, result, model, batch, precision, "capture_resnet50")


def prior_kernels_per_s(prior: str | None) -> float | None:
    return _prior_fact(prior, "capture_kernels_per_s")


def prior_kernels(prior: str | None, default: float) -> float:
    return _prior_fact(prior, "capture_kernels") or default


def _prior_fact(prior: str | None, key: str):
    if not prior:
        return None
    try:
        steps = json.loads((Path(prior) / "steps.json").read_text())["steps"]
    except (OSError, ValueError, KeyError):
        return None
    for s in steps:
        value = s.get("facts", {}).get(key)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None


def capture(args, root: Path, result: Result, model, batch, precision, prefix: str) -> None:
    from profiling.cli import main as profiling_main

    s = sizes(args.tiny, args.device)
    ncu = os.environ.get("GPU_CHECK_NCU") or find_ncu() or "ncu"
    timeout = max(5, int(args.limit_s) - 40)
    argv = ["--nvtx-modules", "--model", model, "--batch", str(batch), "--precision", precision]
    argv += [
        "--image-size",
        str(224 if not args.tiny else s["image_size"]),
        "--device",
        args.device,
    ]
    argv += [
        "--warmup-iters",
        "2",
        "--profile-steps",
        "1",
        "--ncu",
        ncu,
        "--timeout-s",
        str(timeout),
    ]
    argv += ["--out", str(root / "ncu"), "--experiment", EXPERIMENT]
    t0 = time.monotonic()
    rc = quiet_main(profiling_main, argv)
    wall = time.monotonic() - t0
    run = latest_run("profile")
    result.facts[f"{prefix}_wall_s"] = round(wall, 1)
    if rc != 0 or run is None:
        error = run.data.tags.get("error", "") if run is not None else ""
        result.problems.append(f"python -m profiling exited {rc}" + (f": {error}" if error else ""))
        return
    check_capture(run, wall, result, prefix)


def check_capture(run, wall: float, result: Result, prefix: str) -> None:
    """The checks of one FINISHED profile run (see step_capture)."""
    m, t = run.data.metrics, run.data.tags
    kernels = m.get("ncu_kernels", 0)
    result.facts[f"{prefix}_kernels"] = kernels
    result.facts[f"{prefix}_kernels_per_s"] = round(kernels / wall, 3) if wall > 0 else 0
    for key in ("ncu_missing", "ncu_count_check", "ncu_roofline", "ncu_version", "ncu_chip"):
        result.facts[f"{prefix}_{key}"] = t.get(key, "")
    for key in ("ncu_dram_bytes", "ncu_intensity_dram_flops_per_byte", "ncu_flops_per_step"):
        if key in m:  # to judge by eye: DRAM bytes and intensity plausible for the config
            result.facts[f"{prefix}_{key}"] = m[key]
    if t.get("ncu_missing", "none") not in ("", "none"):
        result.problems.append(f"quantities without counters in the capture: {t['ncu_missing']}")
    ratio = m.get("ncu_flops_to_counted_ratio")
    if ratio is not None:
        result.ratios[f"{prefix}_flops_to_counted"] = ratio
    if ratio is None or abs(ratio - 1) > CAPTURE_TOLERANCE:
        result.problems.append(
            f"captured FLOPs per step / counted = {ratio:.4g}: not within {CAPTURE_TOLERANCE:.0%}"
            if ratio is not None
            else "no captured-to-counted FLOPs ratio (ncu_flops_to_counted_ratio)"
        )
    for phase in ("forward", "backward"):
        share = m.get(f"ncu_phase_{phase}_flops_to_counted_ratio")
        if share is not None:
            result.ratios[f"{prefix}_{phase}_flops_to_counted"] = share
        if not m.get(f"ncu_phase_{phase}_kernels"):
            result.problems.append(f"no {phase} kernels in the capture")


# ------------------------------------------------------------------------------ energy
def step_energy(args, root: Path, result: Result) -> None:
    """A train run measured for more than 10 s: NVML joules per sample."""
    from train.__main__ import main as train_main

    s = sizes(args.tiny, args.device)
    model, batch, precision, seconds = s["energy"]
    argv = config_argv(s, model, batch, precision, False, args.device)
    argv = argv[: argv.index("--iters")] + ["--iters", "auto", "--ci-target", "1e-9"]
    argv += ["--max-iters", "1000000", "--max-time-s", str(seconds), "--experiment", EXPERIMENT]
    rc = quiet_main(train_main, [*argv, "--no-progress"])
    run = latest_run("train")
    if rc != 0 or run is None:
        result.problems.append(f"train exited {rc}")
        return
    m, t = run.data.metrics, run.data.tags
    for key in ("energy_j", "energy_j_per_sample", "energy_window_s", "energy_avg_power_w"):
        if key in m:
            result.facts[key] = m[key]
    result.facts["energy_source"] = t.get("energy_source", "")
    result.facts["energy_note"] = t.get("energy_note", "")
    if not t.get("energy_source", "").startswith("nvml"):
        result.problems.append(f"no NVML energy: {t.get('energy_note') or t.get('energy_source')}")
    elif m.get("energy_window_s", 0) < 10 and not args.tiny:
        result.problems.append(f"energy read over {m.get('energy_window_s')} s, not > 10 s")


# ------------------------------------------------------------------------------ breakdown, analysis
def step_breakdown(args, root: Path, result: Result) -> None:
    from profiling.cli import main as profiling_main

    s = sizes(args.tiny, args.device)
    model, batch, precision = s["breakdown"]
    argv = ["--breakdown", *config_argv(s, model, batch, precision, False, args.device)]
    argv = argv[: argv.index("--iters")] + ["--iters", "2" if args.tiny else "3"]
    rc = quiet_main(profiling_main, [*argv, "--experiment", EXPERIMENT, "--no-progress"])
    run = latest_run("breakdown")
    if rc != 0 or run is None or run.info.status != "FINISHED":
        result.problems.append(f"python -m profiling --breakdown exited {rc}")
        return
    m = run.data.metrics
    for key in ("breakdown_step_s", "breakdown_rows_fraction", "breakdown_module_fraction"):
        if key in m:
            result.facts[key] = m[key]
    if m.get("breakdown_train_flops_per_step"):
        result.ratios["breakdown_flops_to_train_flops"] = (
            m["breakdown_flops_per_step"] / m["breakdown_train_flops_per_step"]
        )
    for part in ("forward", "backward", "optimizer"):
        if f"breakdown_{part}_fraction" in m:
            result.ratios[f"breakdown_{part}_fraction"] = m[f"breakdown_{part}_fraction"]


def step_analysis(args, root: Path, result: Result) -> None:
    from analysis.app import main as analysis_main

    out = root / "report"
    argv = ["--experiment", EXPERIMENT, "--out", str(out), "--jobs", "1"]
    rc = quiet_main(analysis_main, argv)
    html = out / "report.html"
    result.facts["report_html_bytes"] = html.stat().st_size if html.is_file() else 0
    result.facts["figures"] = len(list(out.glob("**/*.png"))) if out.is_dir() else 0
    if rc != 0:
        result.problems.append(f"python -m analysis exited {rc}")
    elif not html.is_file() or html.stat().st_size == 0:
        result.problems.append("python -m analysis wrote no report.html")


STEP_FUNCTIONS = {
    "versions": step_versions,
    "peaks": step_peaks,
    "capture": step_capture,
    "train": step_train,
    "energy": step_energy,
    "breakdown": step_breakdown,
    "analysis": step_analysis,
    "capture-resnet50": step_capture_resnet50,
}

if __name__ == "__main__":
    sys.exit(main())
