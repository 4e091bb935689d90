"""What no measurement on one device can exceed: the plausibility bounds every reader applies.

A value read back from a tracking store or an input file is untrusted (anyone can write a run to an
unauthenticated server; a CSV can be edited). A figure beyond these bounds is not a measurement of
any device this project can run on, so the readers leave it out with a line naming it:
`analysis/screen.py` (every run analysis fetches) and `profiling/ncu/checks.py` (every kernel of an
imported ncu file). One definition, used by both. Pure: constants only.

The bounds are deliberately loose: a real measurement must never trip them, so each sits at least
10x above the fastest figure of the vendor table (roofline.datasheets; its fastest entries are
989.5 TFLOP/s dense bf16 on H100/H200 and 4.8 TB/s DRAM on H200), which tests/test_screen.py checks
against the table itself. They catch what is not a measurement at all: 1e300, inf as MLflow stores it
(1.8e308), a unit read wrongly by a factor of 1e6.
"""

from __future__ import annotations

MAX_FLOPS_PER_S = 1e19
"""10 EFLOP/s per device: ~10,000x the fastest dense figure in the vendor table (989.5 TFLOP/s)."""
MAX_DRAM_BYTES_PER_S = 1e14
"""100 TB/s of DRAM (device memory) bandwidth: ~20x the fastest in the vendor table (4.8 TB/s)."""
MAX_CACHE_BYTES_PER_S = 1e16
"""10 PB/s for an L2 or L1 level: on-chip caches are faster than DRAM, and a CPU's L1 summed over
all cores reaches ~100 TB/s (192 cores x 192 B/cycle x 3.7 GHz), so 100x that."""
MAX_CLOCK_HZ = 1e11
"""100 GHz for a clock (cycles per second): ~30x the fastest GPU or CPU boost clock (~3 GHz)."""
MAX_STEP_S = 3.2e7
"""One year for one training step (or one profiled step's kernels): no benchmark runs longer."""
MAX_SAMPLES_PER_S = MAX_DRAM_BYTES_PER_S / 3
"""Samples per second: every sample's input (at least one 8-bit RGB pixel, 3 bytes) crosses device
memory at least once, so no device trains more than MAX_DRAM_BYTES_PER_S / 3 samples per second."""
MAX_INTENSITY_FLOPS_PER_BYTE = 1e6
"""FLOPs per DRAM byte: the densest operation, an n x n x n fp32 matrix product, does 2n^3 FLOPs on
12n^2 bytes (n/6 FLOP/byte); 1e6 needs n = 6e6, matrices of 144 TB each, beyond any device's
memory."""
MIN_RATE_PER_S = 1e6
"""The slowest ceiling (FLOP/s or byte/s) a device's peak can be: a million per second, ~1,000x
below a 1990s PC. Below it a derived quantity leaves float range: a DRAM peak of 1e-300 byte/s made
the ridge point 1e312 FLOP/byte (inf) and every analysis ended in `OverflowError: cannot convert
float infinity to integer`. With it every ridge is at most MAX_FLOPS_PER_S / 1e6."""
