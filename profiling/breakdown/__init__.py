"""Where a training step's time goes: a per-module, per-phase, time-weighted roofline.

`python -m profiling --breakdown <train config flags>` runs warmup, then a few recorded steps of the
project's one `train.step.train_step` under torch.profiler, with one profiler range per module
opened and closed by forward hooks, and logs one MLflow run of kind `breakdown` (docs/breakdown.md).

Pure core (no mlflow, no files, no plots):

* `names`: the range names the recorder writes and the attribution reads;
* `hooks`: `Tracker`, the forward hooks, phase marks and autograd sequence-number map;
* `events`: `Ev`, a profiler event as plain data (from torch's kineto results, or made by a test);
* `attribute`: events -> time per (module, phase) and the step's parts;
* `counts`: FLOPs and modeled bytes per (module, phase), from one counted step;
* `table`: the rows of `layers.csv`, the default view, the step's parts as metrics;
* `text`: the summary line, the description, layers.csv, breakdown.json, the printed view;
* `trace`: the bounded Chrome trace; `ncu`: rows from a capture with module NVTX ranges.

Edges: `record` (runs the steps under the profiler), `roof` (the device's ceilings), `figures`,
`cli` (the MLflow run), `ncu_log` (a profile run's rows), `nvtx_steps` (profile mode with module
NVTX ranges, the program `python -m profiling --nvtx-modules` runs under ncu).
"""
