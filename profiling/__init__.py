"""Nsight Compute capture and import (`python -m profiling`) and roofline ceilings (`python -m profiling.peaks`)."""
