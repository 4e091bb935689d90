"""Issue 32, numbers: a peak so small (or large) that a derived quantity leaves float range is no
device's peak, whether it comes from a store, a --peaks-file or the built-in table."""

from __future__ import annotations

import json

import pytest

from analysis import screen
from common.errors import UsageError
from roofline import vendor
from roofline.ceilings import roof_from_peaks_row


@pytest.mark.parametrize(
    "key", ["peak_dram_bytes_per_s", "peak_flops_per_s_fp32", "peak_l2_bytes_per_s"]
)
def test_a_peak_of_1e_minus_300_in_a_store_is_left_out(key):
    """main: passed the screen (> 0); the ridge point became inf and every analysis ended in
    `OverflowError: cannot convert float infinity to integer` out of the figure pool."""
    assert screen.problem(key, 1e-300) == "below 1e+06"
    assert screen.problem(key, 5e11) is None
    row = {"run_id": "r" * 32, f"metrics.{key}": 1e-300, "metrics.peak_flops_per_s_fp16": 1e14}
    roof = roof_from_peaks_row(row, "GPU")
    assert roof.bytes_per_s == {} and roof.flops_per_s == {"fp16": 1e14}


def test_a_peaks_file_with_1e_minus_300_is_refused_in_one_line(tmp_path):
    path = tmp_path / "peaks.json"
    entry = {"device_name": "Box", "flops_per_s": {"fp32": 1e12}, "source": "me"}
    path.write_text(json.dumps([dict(entry, dram_bytes_per_s=1e-300)]))
    with pytest.raises(UsageError) as err:
        vendor.load_overrides(path)
    assert str(err.value) == (
        f"peaks file {path}, entry 1 (Box): dram_bytes_per_s = 1e-300 is not a device's peak: use "
        "a value from 1e+06 to 1e+14"
    )
    path.write_text(json.dumps([dict(entry, dram_bytes_per_s=3e11)]))
    assert vendor.load_overrides(path)[0].peaks.dram_bytes_per_s == 3e11


def test_a_peaks_file_that_is_a_device_is_not_called_missing(tmp_path):
    """main: `--peaks-file /dev/zero` said "does not exist" (and a FIFO would never end)."""
    with pytest.raises(UsageError) as err:
        vendor.load_overrides("/dev/zero")
    assert str(err.value) == (
        "peaks file /dev/zero is not a file (a folder, device or pipe): give a JSON/YAML file"
    )
    with pytest.raises(UsageError, match="does not exist"):
        vendor.load_overrides(tmp_path / "nope.json")
