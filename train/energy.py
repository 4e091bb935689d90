"""Energy over the measured steps, and NVIDIA clock, temperature and power samples.

A train run measures its energy where the machine has a counter, and says why not elsewhere (tag
`energy_note`), never with an estimate (docs/schema.md, "Energy"):

* CUDA: NVML's total-energy counter of the run's GPU (`nvmlDeviceGetTotalEnergyConsumption`,
  millijoules since the driver loaded; Volta and newer), read before and after the measured steps.
  While they run, a thread samples the SM clock, temperature, power and clock-event (throttle)
  reasons every SAMPLE_INTERVAL_S (artifact `energy/nvml_samples.csv`; analysis flags throttling
  from them).
* CPU: the RAPL package counters under /sys/class/powercap (`intel-rapl:<n>/energy_uj`, also used
  by AMD's driver), polled by the same thread so a counter wrap (`max_energy_range_uj`) is counted.
  A package counter sees everything on the package: other processes' work included.
* anything else (MPS, a CPU without readable RAPL, a pre-Volta GPU): `energy_note` says why.

The readers are injectable (`nvml` a pynvml-like module, `powercap` a folder), so tests fake both.
Nothing here imports torch at module level or talks to MLflow; `meter_for(device)` never raises.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

SAMPLE_INTERVAL_S = 0.2
"""seconds between two NVML samples (and RAPL polls) while the measured steps run."""
POWERCAP = Path("/sys/class/powercap")
NOT_MEASURABLE = "not measurable here"

# NVML clock-event reasons that lower the clock below what the load asks for (nvml.h,
# nvmlClocksEventReason*): power cap, hardware slowdown, thermal slowdowns, power brake.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
SAMPLE_COLUMNS = ("t_s", "sm_clock_hz", "temperature_c", "power_w", "clock_event_reasons")


@dataclass
class Sample:
    """One NVML sample: seconds since the measured steps began, SM clock, temperature, power draw
    and the clock-event reasons bitmask (None where NVML did not answer)."""

    t_s: float
    sm_clock_hz: float | None
    temperature_c: float | None
    power_w: float | None
    clock_event_reasons: int | None


class _Counter:
    """A cumulative energy counter of one or more zones, polled: joules since `start()`."""

    source = ""

    def zones_j(self) -> list[float]:  # pragma: no cover - interface
        raise NotImplementedError

    def ranges_j(self) -> list[float | None]:
        """Per zone the value at which the counter wraps to 0 (None: it does not wrap)."""
        return [None] * len(self._last)

    def start(self) -> None:
        self._last = self.zones_j()
        self.total_j = 0.0

    def poll(self) -> None:
        now = self.zones_j()
        for i, (before, after) in enumerate(zip(self._last, now)):
            step = after - before
            if step < 0:  # the counter wrapped (RAPL) or was reset
                wrap = self.ranges_j()[i]
                step = step + wrap if wrap else 0.0
            self.total_j += step
        self._last = now


class NvmlCounter(_Counter):
    """NVML's total-energy counter of one GPU (millijoules, 64-bit: it does not wrap)."""

    def __init__(self, nvml, handle, name: str):
        self.nvml, self.handle = nvml, handle
        self.source = f"nvml: total energy counter of {name}"
        self._last = []

    def zones_j(self) -> list[float]:
        return [float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1e3]


class RaplCounter(_Counter):
    """The RAPL package zones under a powercap folder (microjoules, wrapping at
    max_energy_range_uj)."""

    def __init__(self, zones: list[Path]):
        self.zones = zones
        names = [f"{z.name} ({_read_text(z / 'name')})" for z in zones]
        self.source = f"rapl: {', '.join(names)} under {zones[0].parent}"
        self._ranges = [_read_float(z / "max_energy_range_uj") for z in zones]
        self._last = []

    def zones_j(self) -> list[float]:
        return [float(_read_text(z / "energy_uj")) / 1e6 for z in self.zones]

    def ranges_j(self) -> list[float | None]:
        return [r / 1e6 if r and r > 0 else None for r in self._ranges]


def _read_text(path: Path) -> str:
    return path.read_text().strip()


def _read_float(path: Path) -> float | None:
    try:
        return float(_read_text(path))
    except (OSError, ValueError):
        return None


def rapl_counter(powercap: Path = POWERCAP) -> tuple[RaplCounter | None, str]:
    """The readable RAPL package zones under `powercap`, or (None, why not)."""
    if not powercap.is_dir():
        return None, (
            f"{NOT_MEASURABLE}: {powercap} does not exist (no RAPL powercap driver on this "
            "machine, as in most VMs and containers)"
        )
    zones = sorted(
        z
        for z in powercap.glob("*-rapl:*")
        if z.name.count(":") == 1 and _read_text_or(z / "name").startswith("package")
    )
    if not zones:
        return None, f"{NOT_MEASURABLE}: no RAPL package zone under {powercap}"
    try:
        counter = RaplCounter(zones)
        counter.zones_j()
    except PermissionError:
        return None, (
            f"{NOT_MEASURABLE}: {zones[0] / 'energy_uj'} is readable by root only (Linux restricts "
            "RAPL since CVE-2020-8694); make it readable to measure CPU energy"
        )
    except (OSError, ValueError) as exc:
        return None, f"{NOT_MEASURABLE}: cannot read {zones[0] / 'energy_uj'} ({exc})"
    return counter, ""


def _read_text_or(path: Path, default: str = "") -> str:
    try:
        return _read_text(path)
    except OSError:
        return default


@dataclass
class NvmlDevice:
    """The run's GPU as NVML knows it, with its static limits (None where NVML gives none)."""

    nvml: Any
    handle: Any
    name: str
    base_clock_hz: float | None = None
    max_clock_hz: float | None = None
    power_limit_w: float | None = None
    slowdown_temp_c: float | None = None
    memory_total_bytes: float | None = None

    def sample(self, t_s: float) -> Sample:
        nv = self.nvml
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        clock = _ask(lambda: nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM) * 1e6)
        temp = _ask(
            lambda: float(nv.nvmlDeviceGetTemperature(self.handle, nv.NVML_TEMPERATURE_GPU))
        )
        power = _ask(lambda: nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3)
        reasons = _ask(lambda: int(reasons_fn(self.handle)))
        return Sample(t_s, clock, temp, power, reasons)


def _ask(query: Callable[[], Any]) -> Any:
    """NVML's answer, or None where the GPU does not support the query."""
    try:
        value = query()
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends
        return None
    return value


def nvml_device(nvml, device) -> NvmlDevice:
    """The NVML handle of torch CUDA `device` (matched by PCI bus id, so CUDA_VISIBLE_DEVICES
    does not matter) and its static limits. Raises when NVML cannot be used."""
    import torch

    nvml.nvmlInit()
    props = torch.cuda.get_device_properties(device)
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    try:
        handle = nvml.nvmlDeviceGetHandleByPciBusId(bus)
    except Exception:  # noqa: BLE001 - older drivers want another format: fall back to the index
        handle = nvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    return describe_nvml_device(nvml, handle, f"{props.name} (PCI {bus})")


def describe_nvml_device(nvml, handle, name: str) -> NvmlDevice:
    """An NvmlDevice with the limits NVML reports for `handle`."""
    nv = nvml
    return NvmlDevice(
        nv,
        handle,
        name,
        base_clock_hz=_ask(
            lambda: nv.nvmlDeviceGetDefaultApplicationsClock(handle, nv.NVML_CLOCK_SM) * 1e6
        ),
        max_clock_hz=_ask(lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM) * 1e6),
        power_limit_w=_ask(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3),
        slowdown_temp_c=_ask(
            lambda: float(
                nv.nvmlDeviceGetTemperatureThreshold(handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
            )
        ),
        memory_total_bytes=_ask(lambda: float(nv.nvmlDeviceGetMemoryInfo(handle).total)),
    )


@dataclass
class Meter:
    """Measures energy (and NVML samples) between `with` entry and exit; `add_to` writes what it
    found into a run record. A failure of the counter mid-way loses the energy, never the run."""

    counter: _Counter | None = None
    note: str = ""
    gpu: NvmlDevice | None = None
    interval_s: float = SAMPLE_INTERVAL_S
    clock: Callable[[], float] = time.perf_counter
    samples: list[Sample] = field(default_factory=list)
    energy_j: float | None = None
    window_s: float | None = None

    def __enter__(self) -> "Meter":
        self._stop = threading.Event()
        self._t0 = self.clock()
        try:
            if self.counter is not None:
                self.counter.start()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        self._poll()
        self._thread = None
        if self.counter is not None or self.gpu is not None:
            self._thread = threading.Thread(target=self._run, name="energy-meter", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._poll()
        self.window_s = self.clock() - self._t0
        if self.counter is not None:
            self.energy_j = self.counter.total_j

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def _poll(self) -> None:
        t = self.clock() - self._t0
        if self.counter is not None:
            try:
                self.counter.poll()
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
        if self.gpu is not None:
            self.samples.append(self.gpu.sample(t))

    def _fail(self, exc: BaseException) -> None:
        self.note = f"{NOT_MEASURABLE}: reading {self.counter.source} failed ({exc})"
        self.counter = None

    def add_to(self, result, samples: int) -> None:
        """Energy metrics, tags and the NVML samples artifact into `result` (a BenchResult:
        `metrics`, `tags`, `texts`); `samples` = training samples processed in the window."""
        metrics, tags = result.metrics, result.tags
        if self.energy_j is not None and self.energy_j >= 0 and samples > 0:
            metrics["energy_j"] = self.energy_j
            metrics["energy_j_per_sample"] = self.energy_j / samples
            if self.window_s:
                metrics["energy_window_s"] = self.window_s
                metrics["energy_avg_power_w"] = self.energy_j / self.window_s
            tags["energy_source"] = self.counter.source
            if isinstance(self.counter, RaplCounter):
                tags["energy_note"] = (
                    "RAPL package energy: everything on the CPU package(s) during the measured "
                    "steps, other processes included"
                )
        else:
            tags["energy_source"] = "none"
            tags["energy_note"] = self.note or f"{NOT_MEASURABLE}: no energy counter was read"
        if self.gpu is not None:
            metrics.update(gpu_metrics(self.gpu, self.samples))
            tags["gpu_throttle_reasons"] = throttle_names(self.samples) or "none"
            result.texts["energy/nvml_samples.csv"] = samples_csv(self.samples)


def gpu_metrics(gpu: NvmlDevice, samples: list[Sample]) -> dict[str, float]:
    """Summary metrics of the NVML samples and the GPU's static limits (absent where unknown)."""
    out: dict[str, float] = {"gpu_nvml_samples": float(len(samples))}

    def values(name: str) -> list[float]:
        return [v for s in samples if (v := getattr(s, name)) is not None and math.isfinite(v)]

    clocks, temps, powers = values("sm_clock_hz"), values("temperature_c"), values("power_w")
    if clocks:
        out["gpu_sm_clock_min_hz"] = min(clocks)
        out["gpu_sm_clock_median_hz"] = sorted(clocks)[len(clocks) // 2]
    if temps:
        out["gpu_temperature_max_c"] = max(temps)
    if powers:
        out["gpu_power_max_w"] = max(powers)
    with_reasons = [s for s in samples if s.clock_event_reasons is not None]
    if with_reasons:
        mask = sum(THROTTLE_REASONS)
        hit = sum(1 for s in with_reasons if s.clock_event_reasons & mask)
        out["gpu_throttled_sample_share"] = hit / len(with_reasons)
    for name in (
        "base_clock_hz",
        "max_clock_hz",
        "power_limit_w",
        "slowdown_temp_c",
        "memory_total_bytes",
    ):
        v = getattr(gpu, name)
        if v is not None and math.isfinite(v) and v > 0:
            key = {
                "base_clock_hz": "gpu_sm_clock_base_hz",
                "max_clock_hz": "gpu_sm_clock_max_hz",
                "power_limit_w": "gpu_power_limit_w",
                "slowdown_temp_c": "gpu_temperature_slowdown_c",
                "memory_total_bytes": "device_mem_total_bytes",
            }[name]
            out[key] = float(v)
    return out


def throttle_names(samples: list[Sample]) -> str:
    """The throttle reasons seen in any sample, comma-separated ('' when none)."""
    seen = 0
    for s in samples:
        seen |= s.clock_event_reasons or 0
    return ", ".join(name for bit, name in THROTTLE_REASONS.items() if seen & bit)


def samples_csv(samples: list[Sample]) -> str:
    rows = [",".join(SAMPLE_COLUMNS)]
    for s in samples:
        rows.append(
            ",".join("" if (v := getattr(s, c)) is None else repr(v) for c in SAMPLE_COLUMNS)
        )
    return "\n".join(rows) + "\n"


def meter_for(device, nvml: Any = "auto", powercap: Path = POWERCAP) -> Meter:
    """The Meter for torch `device`: NVML on CUDA, RAPL on CPU, a note elsewhere. Never raises:
    whatever stops a measurement becomes the meter's note. `nvml='auto'` imports pynvml."""
    kind = getattr(device, "type", str(device))
    if kind == "cpu":
        counter, note = rapl_counter(Path(powercap))
        return Meter(counter, note)
    if kind != "cuda":
        return Meter(None, f"{NOT_MEASURABLE}: no energy counter is read on {kind} devices")
    try:
        if nvml == "auto":
            import pynvml as nvml
        gpu = nvml_device(nvml, device)
    except Exception as exc:  # noqa: BLE001 - no driver, no nvidia-ml-py, no such device
        return Meter(None, f"{NOT_MEASURABLE}: NVML unavailable ({type(exc).__name__}: {exc})")
    try:
        counter = NvmlCounter(nvml, gpu.handle, gpu.name)
        counter.zones_j()
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported before Volta
        return Meter(
            None,
            f"{NOT_MEASURABLE}: {gpu.name} has no NVML total-energy counter (Volta and newer "
            f"have one; {type(exc).__name__})",
            gpu,
        )
    return Meter(counter, "", gpu)
