"""The GPU check (docs/gpu.md): `python -m gpu_check` runs every layer's commands on one machine
and returns at most 8 files. `check.py` is the standard-library parent, `steps.py` the steps it
runs, each in a process of its own."""
