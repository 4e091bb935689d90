"""train/energy.py: RAPL and NVML energy counters (faked), NVML samples, and what a run records
where neither can be read (this machine has no /sys/class/powercap)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from train import energy


def result() -> SimpleNamespace:
    return SimpleNamespace(metrics={}, tags={}, texts={})


# ------------------------------------------------------------------------------ RAPL
def make_powercap(root: Path, packages: dict[int, int], max_uj: int = 1_000_000) -> Path:
    """A fake powercap folder: intel-rapl:<n> package zones (energy_uj = packages[n]) with a
    core subzone each (never summed)."""
    for n, uj in packages.items():
        z = root / f"intel-rapl:{n}"
        z.mkdir(parents=True)
        (z / "name").write_text(f"package-{n}\n")
        (z / "energy_uj").write_text(f"{uj}\n")
        (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
        sub = root / f"intel-rapl:{n}:0"
        sub.mkdir()
        (sub / "name").write_text("core\n")
        (sub / "energy_uj").write_text("999999\n")
    return root


def set_uj(root: Path, n: int, uj: int) -> None:
    (root / f"intel-rapl:{n}" / "energy_uj").write_text(f"{uj}\n")


def test_rapl_sums_package_zones_and_counts_a_wrap(tmp_path):
    cap = make_powercap(tmp_path / "powercap", {0: 999_900, 1: 10})
    counter, note = energy.rapl_counter(cap)
    assert note == "" and counter is not None
    assert "intel-rapl:0 (package-0), intel-rapl:1 (package-1)" in counter.source
    counter.start()
    set_uj(cap, 0, 50)  # wrapped at 1,000,000 uJ: 100 + 50 uJ
    set_uj(cap, 1, 2_010)  # 2,000 uJ
    counter.poll()
    set_uj(cap, 0, 1_050)  # 1,000 uJ more
    counter.poll()
    assert counter.total_j == pytest.approx((150 + 2_000 + 1_000) / 1e6)


def test_rapl_missing_unreadable_or_absent_zones_say_why(tmp_path, monkeypatch):
    counter, note = energy.rapl_counter(tmp_path / "nothing")
    assert counter is None and note.startswith("not measurable here: ")
    assert "does not exist (no RAPL powercap driver" in note

    (tmp_path / "empty").mkdir()
    counter, note = energy.rapl_counter(tmp_path / "empty")
    assert counter is None and "no RAPL package zone under" in note

    cap = make_powercap(tmp_path / "locked", {0: 5})
    real = energy._read_text

    def locked(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(energy, "_read_text", locked)
    counter, note = energy.rapl_counter(cap)
    assert counter is None and "readable by root only" in note and "CVE-2020-8694" in note


def test_cpu_meter_on_this_machine_records_why_not(tmp_path):
    meter = energy.meter_for(SimpleNamespace(type="cpu"), powercap=tmp_path / "no-powercap")
    with meter:
        pass
    r = result()
    meter.add_to(r, samples=8)
    assert "energy_j" not in r.metrics and r.tags["energy_source"] == "none"
    assert r.tags["energy_note"].startswith("not measurable here: ")


def test_cpu_meter_with_rapl_gives_joules_per_sample(tmp_path):
    cap = make_powercap(tmp_path / "powercap", {0: 1_000})
    meter = energy.meter_for(SimpleNamespace(type="cpu"), powercap=cap)
    with meter:
        set_uj(cap, 0, 501_000)  # 0.5 J during the "measured steps"
    r = result()
    meter.add_to(r, samples=4)
    assert r.metrics["energy_j"] == pytest.approx(0.5)
    assert r.metrics["energy_j_per_sample"] == pytest.approx(0.125)
    assert r.metrics["energy_window_s"] > 0
    assert r.tags["energy_source"].startswith("rapl: intel-rapl:0 (package-0)")
    assert "other processes included" in r.tags["energy_note"]


def test_other_devices_say_not_measurable():
    meter = energy.meter_for(SimpleNamespace(type="mps"))
    with meter:
        pass
    r = result()
    meter.add_to(r, samples=2)
    assert r.tags["energy_note"] == "not measurable here: no energy counter is read on mps devices"


# ------------------------------------------------------------------------------ NVML (faked)
class FakeNvml:
    """The pynvml calls train/energy.py makes, answering from counters the test controls."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

    def __init__(self, energy_mj=1_000_000, clocks=(1_500, 1_200), reasons=(0, 0x40), volta=True):
        self.energy_mj = energy_mj
        self.clocks, self.reasons, self.volta = list(clocks), list(reasons), volta
        self.calls = 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.volta:
            raise RuntimeError("NVMLError_NotSupported")
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, h, which):
        self.calls += 1
        return self.clocks[min(self.calls - 1, len(self.clocks) - 1)]

    def nvmlDeviceGetTemperature(self, h, which):
        return 83

    def nvmlDeviceGetPowerUsage(self, h):
        return 72_500  # mW

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons[min(self.calls - 1, len(self.reasons) - 1)]

    def nvmlDeviceGetDefaultApplicationsClock(self, h, which):
        return 1_410

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return 1_980

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 72_000

    def nvmlDeviceGetTemperatureThreshold(self, h, which):
        raise RuntimeError("NVMLError_NotSupported")  # left out, never guessed

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=24 * 2**30)


def gpu_meter(nv: FakeNvml) -> energy.Meter:
    gpu = energy.describe_nvml_device(nv, "h", "NVIDIA L4 (PCI 00000000:01:00.0)")
    counter = energy.NvmlCounter(nv, gpu.handle, gpu.name)
    return energy.Meter(counter, "", gpu, interval_s=0.01)


def test_nvml_energy_and_samples_during_the_measured_steps():
    nv = FakeNvml()
    meter = gpu_meter(nv)
    with meter:
        time.sleep(0.05)
        nv.energy_mj += 12_345  # 12.345 J
    r = result()
    meter.add_to(r, samples=100)
    m = r.metrics
    assert m["energy_j"] == pytest.approx(12.345)
    assert m["energy_j_per_sample"] == pytest.approx(0.12345)
    assert (
        r.tags["energy_source"] == "nvml: total energy counter of NVIDIA L4 (PCI 00000000:01:00.0)"
    )
    assert m["gpu_nvml_samples"] >= 3  # one at each end, more from the thread
    assert m["gpu_sm_clock_min_hz"] == 1.2e9 and m["gpu_sm_clock_base_hz"] == 1.41e9
    assert m["gpu_temperature_max_c"] == 83 and m["gpu_power_max_w"] == 72.5
    assert m["gpu_power_limit_w"] == 72.0 and m["device_mem_total_bytes"] == 24 * 2**30
    assert "gpu_temperature_slowdown_c" not in m
    n = int(m["gpu_nvml_samples"])
    assert m["gpu_throttled_sample_share"] == pytest.approx((n - 1) / n)
    assert r.tags["gpu_throttle_reasons"] == "hw_thermal_slowdown"
    lines = r.texts["energy/nvml_samples.csv"].splitlines()
    assert lines[0] == "t_s,sm_clock_hz,temperature_c,power_w,clock_event_reasons"
    assert len(lines) == n + 1 and lines[1].split(",")[1:] == ["1500000000.0", "83.0", "72.5", "0"]


def test_pre_volta_gpu_keeps_samples_and_says_why_no_energy():
    nv = FakeNvml(volta=False)
    gpu = energy.describe_nvml_device(nv, "h", "Tesla P100")
    with pytest.raises(RuntimeError):
        energy.NvmlCounter(nv, gpu.handle, gpu.name).zones_j()
    meter = energy.Meter(
        None, "not measurable here: Tesla P100 has no NVML total-energy counter", gpu
    )
    with meter:
        pass
    r = result()
    meter.add_to(r, samples=10)
    assert "energy_j" not in r.metrics and "Tesla P100" in r.tags["energy_note"]
    assert r.metrics["gpu_nvml_samples"] == 2


def test_a_counter_failing_mid_run_loses_the_energy_not_the_run():
    nv = FakeNvml()
    meter = gpu_meter(nv)
    with meter:
        nv.volta = False  # the next read raises
        time.sleep(0.03)
    r = result()
    meter.add_to(r, samples=10)
    assert "energy_j" not in r.metrics
    assert r.tags["energy_note"].startswith("not measurable here: reading nvml: total energy")
