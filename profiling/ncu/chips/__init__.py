"""Which NVIDIA chip a GPU is, and which Nsight Compute counters that chip has.

* `profiling.ncu.chips.devices`: a device named by torch ("NVIDIA H100 80GB HBM3"), by its compute
  capability ("9.0") or by the chip an ncu report records (``device__attribute_chip``) -> a chip
  name of NVIDIA's metric database (`resolve_chip`).
* `profiling.ncu.chips.counters`: which of this project's counters exist on a chip, and how the
  floating-point tensor-core counters nest (`counters_for`, `ChipCounters.tensor_sum`); from
  libnvperf_host.so when it loads (profiling.ncu.nvperf), else from the committed table
  ``ncu_chips.json`` next to these modules.
* `profiling.ncu.chips.table`: that table generated from the library, and the per-chip tables of
  docs/profiling.md; ``python -m profiling.ncu.chips [--write]`` (`__main__`) prints or writes them.

This file imports nothing, so `import profiling.ncu.chips.<module>` loads only what it names.
"""
