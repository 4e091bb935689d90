"""The GPU check in one command (docs/gpu.md): everything the project measures, run once
on a machine with an NVIDIA GPU within a deadline, and returned as at most 8 files.

    python -m gpu_check --out DIR [--deadline-s 480] [--device cuda|cpu] [--tiny]
    python -m gpu_check --out DIR2 --only capture-resnet50 [--prior DIR]

Steps, in order, each in a child process with its own time limit (cut to what the deadline leaves):
versions (nvidia-smi, driver, ncu, torch, CUDA, cuDNN), setup (the carried wheels of
`make device-wheels` when mlflow is not importable), peaks (GEMM ceilings per dtype, DRAM bandwidth,
next to the datasheet), capture (ncu with module ranges of resnet18 bf16: exit 0, every counter
accepted, forward and backward present, captured FLOPs per step within 5 % of the counted ones,
kernels per second), train (resnet50 at batch 64 and 256 in fp32, tf32 and bf16, with and without
channels_last, each against a bare PyTorch loop of the same config in the same process), energy
(NVML joules per sample over more than 10 s), breakdown, analysis (report.html). `--only
capture-resnet50` is the second call: resnet50 b64 bf16 under ncu, its time limit sized from the
first call's kernels per second (`--prior DIR`, the first call's --out, or `--kernels-per-s`).

Everything lands under one root folder (--root, default a new temporary folder): the sqlite store
(`sqlite:///ROOT/mlflow.db`), artifacts (ROOT/mlruns), ncu CSVs (ROOT/ncu), the analysis cache
(ROOT/cache), each step's output (ROOT/logs). After every step DIR gets: log.txt (what ran, how it
ended, why), ratios.json (a flat object of named ratios), steps.json (every step's status, reason,
seconds and facts), versions.txt, report.html (once analysis made it) and bundle.tar.gz (the root,
at most 15 MiB): a step that runs out of time still returns what came before.

Exit 0 when every step that could run on the device ran; steps the device cannot run (ncu and NVML
on a CPU) are "skipped" with the reason. `--device cpu --tiny` (resnet18, 32 px, batch 2, 2 steps)
is the rehearsal that runs anywhere, and in CI (tests/test_gpu_check.py).

This parent process uses the standard library only: on a machine without mlflow it installs the
wheels of .device-wheels/ into ROOT/site before the steps that need them, which then run with
ROOT/site on PYTHONPATH (and ncu's own extras/python, where its ncu_report module lives).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from gpu_check.children import run_captured, spawn, stop_group
from gpu_check.folders import (
    Refused,
    lock,
    make_root,
    open_out,
    own_files,
    root_path,
    stale_results,
)

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".device-wheels"
EXPERIMENT = "gpu-check"
STEPS = ("versions", "setup", "peaks", "capture", "train", "energy", "breakdown", "analysis")
SECOND_CALL = ("capture-resnet50",)
LIMITS_S = {
    "versions": 45,
    "setup": 90,
    "peaks": 45,
    "capture": 120,
    "train": 180,
    "energy": 45,
    "breakdown": 60,
    "analysis": 60,
    "capture-resnet50": 540,
}
"""Each step's own time limit in seconds (cut to what the deadline leaves)."""
RESERVE_S = 15.0
"""Seconds kept back from the deadline for the last bundle."""
MIN_STEP_S = 8.0
"""A step is not started with less than this left before the deadline."""
STOP_GRACE_S = 10.0
"""Seconds a step gets after SIGINT before SIGKILL."""
BUNDLE_MAX_BYTES = 15 * 2**20
OUT_FILES = ("log.txt", "ratios.json", "steps.json", "versions.txt", "report.html", "bundle.tar.gz")
"""Everything written into --out: at most 8 files."""
NVIDIA_ONLY = {
    "capture": "ncu needs an NVIDIA GPU",
    "capture-resnet50": "ncu needs an NVIDIA GPU",
    "energy": "NVML energy needs an NVIDIA GPU",
}
IMPORTS = (
    ("mlflow", "mlflow mlflow-skinny"),
    ("sqlalchemy", "SQLAlchemy"),
    ("alembic", "alembic"),
    ("deepspeed", "deepspeed"),
    ("nvtx", "nvtx"),
    ("ncu_report", "ncu_report"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
)
"""(module, its distributions) of what the steps import; mlflow may come from either."""
CAPTURE_TOLERANCE = 0.05
"""Captured FLOPs per step within 5 % of the counted training FLOPs."""


# ------------------------------------------------------------------------------ sizes
def sizes(tiny: bool, device: str) -> dict:
    """The configs of every step: the real check, or --tiny (resnet18, 32 px, batch 2)."""
    if tiny:
        precisions = ("fp32", "tf32", "bf16") if device == "cuda" else ("fp32", "bf16")
        return {
            "model": "resnet18",
            "image_size": 32,
            "batches": (2,),
            "precisions": precisions,
            "warmup": 1,
            "iters": 2,
            "num_classes": 10,
            "capture": ("resnet18", 2, "bf16"),
            "capture50": ("resnet50", 2, "bf16"),
            "energy": ("resnet18", 2, "bf16", 3.0),
            "breakdown": ("resnet18", 2, "bf16" if device == "cuda" else "fp32"),
        }
    return {
        "model": "resnet50",
        "image_size": 224,
        "batches": (64, 256),
        "precisions": ("fp32", "tf32", "bf16"),
        "warmup": 3,
        "iters": 10,
        "num_classes": 1000,
        "capture": ("resnet18", 32, "bf16"),
        "capture50": ("resnet50", 64, "bf16"),
        "energy": ("resnet50", 256, "bf16", 12.0),
        "breakdown": ("resnet50", 64, "bf16"),
    }


# ------------------------------------------------------------------------------ finding tools
def find_ncu() -> str | None:
    """ncu on PATH, else the newest of /usr/local/cuda*/bin/ncu and /opt/nvidia/nsight-compute/*/ncu."""
    found = shutil.which("ncu")
    if found:
        return found
    paths = sorted(glob.glob("/usr/local/cuda*/bin/ncu")) + sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/ncu")
    )
    paths = [p for p in paths if os.access(p, os.X_OK)]
    return paths[-1] if paths else None


def ncu_python_dirs(ncu: str | None) -> list[str]:
    """Nsight Compute's extras/python (its ncu_report module) next to the ncu found."""
    if not ncu:
        return []
    real = Path(ncu).resolve()
    dirs = [real.parent / "extras" / "python", real.parent.parent / "extras" / "python"]
    dirs += [Path(p) for p in glob.glob(str(real.parent.parent / "nsight-compute*/extras/python"))]
    return [str(d) for d in dirs if (d / "ncu_report.py").is_file()]


# ------------------------------------------------------------------------------ the parent
class Check:
    """One call: the steps run, their results, and the files in --out rewritten after each."""

    def __init__(self, args: argparse.Namespace) -> None:
        """The folders taken (gpu_check/folders.py: Refused, in one line, before anything is
        written, when --root or --out is not the check's to write) and locked."""
        self.args = args
        root = root_path(args.root)
        self.out = open_out(args.out)
        self.locks = [lock(self.out, "--out")]
        self.root = make_root(root)
        self.locks.append(lock(self.root, "--root"))
        self.t0 = time.monotonic()
        self.started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        self.steps: list[dict] = []
        self.ratios: dict[str, float] = {}
        self.ncu = find_ncu()
        self.site = self.root / "site"
        for sub in ("logs", "results", "ncu", "cache", "spool", "mpl"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for stale in stale_results(self.root, STEPS + SECOND_CALL):  # a root used before
            stale.unlink()

    def close(self) -> None:
        """Release the folders' locks."""
        for fd in self.locks:
            os.close(fd)
        self.locks = []

    def left_s(self) -> float:
        return self.args.deadline_s - (time.monotonic() - self.t0)

    def env(self) -> dict:
        """The children's environment: everything under the root, the project and carried wheels
        importable."""
        paths = [str(REPO)]
        if self.site.is_dir():
            paths.append(str(self.site))
        paths += ncu_python_dirs(self.ncu)
        old = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths + ([old] if old else [])),
            "MLFLOW_TRACKING_URI": f"sqlite:///{self.root / 'mlflow.db'}",
            "ROOFLINE_CACHE_DIR": str(self.root / "cache"),
            "ROOFLINE_SPOOL_DIR": str(self.root / "spool"),
            "MPLCONFIGDIR": str(self.root / "mpl"),
            "MPLBACKEND": "Agg",
            "PYTHONUNBUFFERED": "1",
            "GPU_CHECK_NCU": self.ncu or "",
        }
        for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
            env.pop(name, None)  # inside `mlflow run`: the steps make runs of their own
        if self.args.device == "cpu":
            env.setdefault("DS_ACCELERATOR", "cpu")
            env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "")
        return env

    def skip_reason(self, name: str) -> str | None:
        if self.args.device != "cuda" and name in NVIDIA_ONLY:
            return f"{NVIDIA_ONLY[name]}; this check runs on --device {self.args.device}"
        if name.startswith("capture") and not self.ncu:
            return (
                "ncu not found (PATH, /usr/local/cuda*/bin/ncu, /opt/nvidia/nsight-compute/*/ncu)"
            )
        return None

    def run(self, names: list[str]) -> int:
        self.write()
        for name in names:
            self.steps.append(self.step(name))
            self.write()
        failed = [s["name"] for s in self.steps if s["status"] not in ("ok", "skipped")]
        line = (
            f"gpu check: {len(self.steps) - len(failed)} of {len(self.steps)} steps ok or skipped"
        )
        print(line + (f"; not ok: {', '.join(failed)}" if failed else ""), flush=True)
        return 1 if failed else 0

    def step(self, name: str) -> dict:
        t0 = time.monotonic()
        reason = self.skip_reason(name)
        if reason:
            return record(name, "skipped", reason, 0.0)
        left = self.left_s() - RESERVE_S
        if left < MIN_STEP_S:
            why = f"the deadline ({self.args.deadline_s:g} s) left {max(left, 0):.0f} s"
            return record(name, "not run", why, 0.0)
        # --tiny runs on shared CPUs (CI, a laptop): twice the time; the deadline still holds
        limit = min(LIMITS_S[name] * (2 if self.args.tiny else 1), left)
        print(f"gpu check: {name} (limit {limit:.0f} s) ...", flush=True)
        if name == "setup":
            status, reason, facts = self.setup(limit)
            return record(name, status, reason, time.monotonic() - t0, facts=facts)
        rc, timed_out = self.child(name, limit)
        result = read_result(self.root, name)
        seconds = time.monotonic() - t0
        status, reason = result.get("status", "failed"), result.get("reason", "")
        if timed_out:
            status, reason = (
                "failed",
                f"ran past its {limit:.3g} s limit" + (f"; {reason}" if reason else ""),
            )
        elif not result:
            status, reason = (
                "failed",
                f"exit code {rc}: {last_line(self.root / 'logs' / f'{name}.txt')}",
            )
        elif rc != 0 and status == "ok":
            status, reason = "failed", f"exit code {rc}"
        self.ratios.update(finite(result.get("ratios", {})))
        return record(name, status, reason, seconds, facts=result.get("facts", {}), limit_s=limit)

    def child(self, name: str, limit: float) -> tuple[int, bool]:
        """Run `--child name` with a time limit; (exit code, ran past the limit)."""
        argv = [sys.executable, "-m", "gpu_check.steps", "--child", name]
        argv += ["--root", str(self.root)]
        argv += ["--device", self.args.device, "--limit-s", f"{limit:.0f}"]
        argv += ["--tiny"] if self.args.tiny else []
        if self.args.kernels_per_s:
            argv += ["--kernels-per-s", str(self.args.kernels_per_s)]
        if self.args.prior:
            argv += ["--prior", str(Path(self.args.prior).resolve())]
        with open(self.root / "logs" / f"{name}.txt", "ab") as log:
            proc = spawn(argv, cwd=self.root, env=self.env(), stdout=log, stderr=subprocess.STDOUT)
            try:
                return proc.wait(timeout=limit), False
            except subprocess.TimeoutExpired:
                stop_group(proc, STOP_GRACE_S)
                return proc.returncode if proc.returncode is not None else -9, True
            except KeyboardInterrupt:  # a signal stops the check (Stopped): the step's group too
                stop_group(proc, STOP_GRACE_S)
                raise

    def setup(self, limit: float) -> tuple[str, str, dict]:
        """mlflow importable as it is, or after installing .device-wheels/ into ROOT/site."""
        have = self.imports(limit)
        if have.get("mlflow"):
            return "ok", f"mlflow {have['mlflow']} importable as installed", {"imports": have}
        wheels = sorted(WHEELS.glob("*.whl"))
        if not wheels:
            return (
                "failed",
                "mlflow is not importable and .device-wheels/ has no wheels: run `make device-wheels` where there is a network",
                {"imports": have},
            )
        argv = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet"]
        argv += ["--no-compile"]  # byte-compiling 48 packages takes longer than importing a few
        argv += ["--target", str(self.site), *map(str, wheels)]
        try:
            done = run_captured(argv, timeout=limit)
        except subprocess.TimeoutExpired:
            return "failed", f"pip install of {len(wheels)} wheels ran past {limit:.0f} s", {}
        (self.root / "logs" / "setup.txt").write_text(done.stdout + done.stderr)
        if "No module named pip" in done.stderr:  # a Python without pip: a wheel is a zip
            unzip_wheels(wheels, self.site)
            done = subprocess.CompletedProcess(argv, 0, "", "")
        have = self.imports(limit)
        facts = {"wheels": len(wheels), "imports": have}
        if done.returncode != 0 or not have.get("mlflow"):
            return (
                "failed",
                f"pip install --target {self.site} failed: {last_line(self.root / 'logs' / 'setup.txt')}",
                facts,
            )
        return "ok", f"installed {len(wheels)} wheels into {self.site}", facts

    def imports(self, limit: float) -> dict:
        """module -> installed version ("" when not found) of what the steps need, as the children
        see them (found, not imported: importing torch and deepspeed takes seconds)."""
        code = (
            "import importlib.util as u, importlib.metadata as md, json\n"
            "def v(m, ds):\n"
            "    if u.find_spec(m) is None: return ''\n"
            "    for d in ds.split():\n"
            "        try: return md.version(d)\n"
            "        except md.PackageNotFoundError: pass\n"
            "    return 'found'\n"
            "print(json.dumps({m: v(m, d) for m, d in %r}))\n" % (IMPORTS,)
        )
        try:
            done = run_captured(
                [sys.executable, "-c", code],
                timeout=max(10, limit / 2),
                env=self.env(),
                cwd=self.root,
            )
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
            return {}

    # -------------------------------------------------------------------------- the files
    def write(self) -> None:
        """Rewrite every file in --out (each written whole, then renamed into place)."""
        summary = {
            "device": self.args.device,
            "tiny": self.args.tiny,
            "started": self.started,
            "deadline_s": self.args.deadline_s,
            "elapsed_s": round(time.monotonic() - self.t0, 1),
            "root": str(self.root),
            "ncu": self.ncu or "",
            "steps": self.steps,
        }
        put(self.out / "steps.json", json.dumps(summary, indent=1, default=str) + "\n")
        put(self.out / "ratios.json", json.dumps(self.ratios, indent=1, sort_keys=True) + "\n")
        put(self.out / "log.txt", log_text(summary, self.ratios, self.root))
        for name, src in (("versions.txt", "versions.txt"), ("report.html", "report/report.html")):
            if (self.root / src).is_file():
                put(self.out / name, (self.root / src).read_bytes())
        put(self.out / "bundle.tar.gz", bundle(self.root))


def unzip_wheels(wheels: list[Path], site: Path) -> None:
    """Install wheels as pip --target would, without pip: unzip each into `site`, the files of
    its <name>.data/purelib and platlib folders moved to the top (scripts and headers left out)."""
    import zipfile

    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for member in z.infolist():
                parts = member.filename.split("/")
                if parts[0].endswith(".data"):
                    if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                        continue
                    parts = parts[2:]
                target = site.joinpath(*parts)
                if member.is_dir():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))
                if member.external_attr >> 16 & 0o111:  # executables stay executable
                    target.chmod(0o755)


def record(name: str, status: str, reason: str, seconds: float, **extra) -> dict:
    line = (
        f"gpu check: {name}: {status}" + (f" ({reason})" if reason else "") + f" in {seconds:.0f} s"
    )
    print(line, flush=True)
    return {"name": name, "status": status, "reason": reason, "seconds": round(seconds, 1), **extra}


def read_result(root: Path, name: str) -> dict:
    path = root / "results" / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def finite(values: dict) -> dict[str, float]:
    """The finite numbers of `values` (a ratio read back is untrusted)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[str(k)] = float(v)
    return out


def last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"


def put(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def log_text(summary: dict, ratios: dict, root: Path) -> str:
    """log.txt: the call, every step's line, the ratios, and the output tail of steps not ok."""
    lines = [
        f"GPU check, device {summary['device']}{' (tiny)' if summary['tiny'] else ''}, "
        f"started {summary['started']}, {summary['elapsed_s']:.0f} s of {summary['deadline_s']:g} s",
        f"root {summary['root']}; ncu {summary['ncu'] or 'not found'}",
        "",
    ]
    for s in summary["steps"]:
        lines.append(f"{s['name']:<18} {s['status']:<8} {s['seconds']:>6.0f} s  {s['reason']}")
        for k, v in sorted(s.get("facts", {}).items()):
            if not isinstance(v, (dict, list)):
                lines.append(f"{'':<20}{k} = {v}")
    lines += ["", "ratios:"] + [f"  {k} = {v:.4g}" for k, v in sorted(ratios.items())]
    for s in summary["steps"]:
        if s["status"] not in ("ok", "skipped"):
            tail = tail_lines(root / "logs" / f"{s['name']}.txt", 25)
            lines += ["", f"--- {s['name']}: last lines of its output ---", *tail]
    return "\n".join(lines) + "\n"


def tail_lines(path: Path, n: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return ["(no output)"]


def bundle(root: Path) -> bytes:
    """What the check wrote in its root as tar.gz (gpu_check/folders.py's own_files: not the
    installed wheels, nothing it did not write), at most BUNDLE_MAX_BYTES: the largest files are
    left out (and named in LEFT_OUT.txt inside) until it fits."""
    files = own_files(root, STEPS + SECOND_CALL)
    left_out: list[Path] = []
    while True:
        data = _tar(root, files, left_out)
        if len(data) <= BUNDLE_MAX_BYTES or not files:
            return data
        biggest = max(files, key=lambda p: p.stat().st_size if p.exists() else 0)
        files.remove(biggest)
        left_out.append(biggest)


def _tar(root: Path, files: list[Path], left_out: list[Path]) -> bytes:
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in files:
            try:
                tar.add(p, arcname=str(p.relative_to(root)))
            except OSError:  # a file a running step removed meanwhile
                continue
        if left_out:
            text = "".join(f"{p.relative_to(root)} ({p.stat().st_size} bytes)\n" for p in left_out)
            info = tarfile.TarInfo("LEFT_OUT.txt")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


# ------------------------------------------------------------------------------ command line
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m gpu_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", help="where the (at most 8) result files go")
    ap.add_argument("--deadline-s", type=float, default=480.0, help="the whole call's seconds")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="resnet18, 32 px, batch 2, 2 steps")
    ap.add_argument("--root", help="the folder everything is written under (default: new temp)")
    ap.add_argument("--only", help=f"comma-separated steps among {', '.join(STEPS + SECOND_CALL)}")
    ap.add_argument("--prior", help="the first call's --out (its kernels per second)")
    ap.add_argument("--kernels-per-s", type=float, help="ncu kernels per second, to size a capture")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--limit-s", type=float, default=60.0, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def step_names(only: str | None) -> list[str]:
    """The steps to run: all, or those --only names (Refused when it names none, or one that is
    no step)."""
    if only is None:
        return list(STEPS)
    known = ", ".join(STEPS + SECOND_CALL)
    names = [n.strip() for n in only.replace(" ", ",").split(",") if n.strip()]
    if not names:
        raise Refused(f"--only {only!r} names no step; steps: {known}")
    bad = [n for n in names if n not in STEPS + SECOND_CALL]
    if bad:
        raise Refused(f"--only: unknown step(s) {', '.join(bad)}; steps: {known}")
    # the carried wheels come first whenever a step needs mlflow
    return (["setup"] if "setup" not in names and set(names) - {"versions"} else []) + names


class Stopped(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP to the check: the running step's group is stopped, no other
    step starts, and the check exits 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop(signum, frame) -> None:
    for sig in STOP_SIGNALS:  # once: the stop itself is not interrupted
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    """The check; 2 and one line on stderr for what it refuses (before anything is written), 128 +
    the signal's number when stopped by one."""
    args = parse(argv)
    try:
        if not args.out:
            raise Refused("--out DIR is required")
        if not args.deadline_s > 0:
            raise Refused("--deadline-s must be > 0")
        names = step_names(args.only)
        check = Check(args)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    before = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}  # `timeout` sends SIGTERM
    try:
        return check.run(names)
    except Stopped as stop:
        check.steps.append(record("interrupted", "failed", f"stopped by {stop.name}", 0.0))
        check.write()
        done = len(check.steps) - 1
        print(f"gpu check: stopped by {stop.name} after {done} step(s)", file=sys.stderr)
        return 128 + stop.signum
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        check.close()


if __name__ == "__main__":
    sys.exit(main())
