"""A distributed configuration as one torchrun job (what a sweep runs per child), and the result
file through which the job's rank 0 hands its record back instead of logging it.

The sweep's process holds the child run (so resume, the spool and the parent link work as for
single-process children); the job measures. `torchrun_argv` is pure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict

from common.errors import BenchError
from train.bench import BenchResult
from train.config import TrainConfig, config_flags

RESULT_FILE_FLAG = "--result-file"
STDERR_TAIL_LINES = 40


def torchrun_argv(cfg: TrainConfig, result_file: str, python: str = sys.executable) -> list[str]:
    """`torchrun --standalone --nproc-per-node <world_size> -m train <cfg's flags>`, its rank 0
    writing the record to `result_file`."""
    return [
        python,
        "-m",
        "torch.distributed.run",  # torchrun
        "--standalone",
        "--nproc-per-node",
        str(cfg.world_size),
        "-m",
        "train",
        *config_flags(cfg),
        RESULT_FILE_FLAG,
        result_file,
        "--no-progress",
        "--no-system-metrics",
    ]


def write_result(
    path: str, result: BenchResult | None, status: str = "FINISHED", error: str = ""
) -> None:
    """Rank 0's record (or its failure) for the process that launched the job; atomic."""
    data = {"status": status, "error": error, "result": asdict(result) if result else None}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def read_result(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def run_job(cfg: TrainConfig, device=None, progress: bool = False) -> BenchResult:
    """Measure `cfg` as one torchrun job on this machine; its record, or a BenchError with the
    failing rank's reason (the job's own, else the last error line torchrun printed)."""
    with tempfile.TemporaryDirectory(prefix="roofline-job-") as tmp:
        path = os.path.join(tmp, "result.json")
        done = subprocess.run(
            torchrun_argv(cfg, path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        data = read_result(path)
    if data is not None and data["status"] == "FINISHED":
        return BenchResult(**data["result"])
    if data is not None:
        raise BenchError(data["error"])
    raise BenchError(
        f"torchrun job ({cfg.world_size} processes) exited with code {done.returncode} and no "
        f"result: {last_error_line(done.stderr)}"
    )


def last_error_line(text: str) -> str:
    """The last `error: ...` line of a job's stderr, else its last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines()[-STDERR_TAIL_LINES * 10 :] if ln.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line[len("error: ") :]
    return lines[-1] if lines else "no output"
