"""Environment facts as MLflow tags: device, host, versions (via torch.utils.collect_env)."""

from __future__ import annotations

import platform
import subprocess
from functools import lru_cache

from common import schema


def cpu_model_name() -> str:
    """The CPU's marketing name ("Intel(R) Xeon(R) Processor"), or the platform's best guess."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: str) -> str:
    """Name of the device as the vendor table keys it (torch.cuda.get_device_name for CUDA)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple MPS ({cpu_model_name()})"
    return cpu_model_name()


@lru_cache(maxsize=1)
def _collect_env():
    from torch.utils import collect_env

    return collect_env.get_env_info()


def environment_tags(device: str, env_label: str | None = None) -> dict[str, str]:
    """The schema's environment tags for a run on `device` (see docs/schema.md)."""
    import torch

    info = _collect_env()
    dev = torch.device(device)
    tags = {
        schema.TAG_ENV_LABEL: env_label or schema.default_env_label(),
        schema.TAG_DEVICE_NAME: device_name(device),
        schema.TAG_DEVICE_TYPE: dev.type,
        schema.TAG_HOST: schema.host_name(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "os": str(info.os or platform.platform()),
        "cpu_model": cpu_model_name(),
        "torch_threads": str(torch.get_num_threads()),
    }
    if dev.type == "cuda":  # the CUDA stack of the torch build: tagged where a run uses it
        tags["cuda_version"] = str(torch.version.cuda or "none")
        tags["cudnn_version"] = str(
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "none"
        )
        tags["driver_version"] = str(info.nvidia_driver_version or "none")
        props = torch.cuda.get_device_properties(dev)
        tags["cuda_capability"] = f"{props.major}.{props.minor}"
        tags["device_mem_bytes"] = str(props.total_memory)
    return tags


def environment_report() -> str:
    """torch.utils.collect_env's full report (logged as the `environment.txt` artifact)."""
    from torch.utils import collect_env

    return collect_env.pretty_str(_collect_env())
