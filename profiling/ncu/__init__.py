"""Nsight Compute: the ncu command, its CSV and .ncu-rep readers, the counting, the chips."""
