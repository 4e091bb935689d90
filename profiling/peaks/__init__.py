"""Measured roofline ceilings on the device at hand: GEMM FLOP/s per dtype, STREAM DRAM and L2
bandwidth. `python -m profiling.peaks` (the CLI, `__main__.py`) measures and logs a `peaks` run.
Method and figures: docs/peaks.md.

One job per module; only `__main__` prints or talks to MLflow (through common.tracking):

    dtypes.py    which dtypes a device can run and measures by default (pure)
    config.py    PeaksConfig: the flags, validated
    sizing.py    STREAM array sizes and the fit check (pure)
    sampling.py  the sampling engine: warmup, calibration, alternating samples, time budget
    gemm.py      the compute kernel (torch.mm) and the CPU fp16/bf16 probe
    stream.py    the STREAM kernels (copy, triad), on CUDA's L2 as CUDA graphs of many copies
    measure.py   run_peaks: every step in plan order within the time budget
    results.py   PeaksResult: metrics, the samples artifact, vendor fractions, the summary line
    facts.py     device facts: capability, memory, CPU caches from sysfs, CPU matrix flags

This file imports nothing, so `import profiling.peaks.<module>` loads only what it names.
"""
