"""Where vendor ceilings come from: profiling/peak_table.py, with the user's --peaks-file.

`find(device_name, overrides=None) -> VendorPeaks | None` (fields device_name, flops_per_s
{dtype: FLOP/s}, dram_bytes_per_s, source), with tolerant name matching and user entries from a
JSON/YAML file (`--peaks-file`, else $ROOFLINE_PEAKS_FILE; format in docs/peaks.md). Analysis passes
its --peaks-file straight through, so there is one file format and one parser in the project.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from roofline import vendor as peak_table


def load_vendor_lookup(peaks_file: str = "") -> Callable[[str], Any]:
    """lookup(device_name) -> VendorPeaks | None; a device profiling.peak_table does not know
    gives None (the report then says `no peaks for ...`).

    A bad peaks file is a one-line UsageError here, before any run is read.
    """
    path = peaks_file or os.environ.get(peak_table.PEAKS_FILE_ENV, "")
    if not path:
        return peak_table.find
    peak_table.load_overrides(path)  # validate now: one line naming the bad entry
    return lambda name: peak_table.find(name, overrides=path)
