"""Measured rooflines and reports from runs on a tracking server (`python -m analysis`)."""
