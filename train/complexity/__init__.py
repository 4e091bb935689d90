"""`python -m train.complexity`: what each model costs to train, per model and batch size.

Parameters, forward FLOPs/MACs, training FLOPs, modeled intensity, gradient and optimizer-state
bytes, activations saved for backward (per layer too), the predicted training memory per batch
size and the largest batch predicted to fit in the device's memory; on the CPU (by default for
the cheapest model, with --validate-rss true for all) the prediction checked against the RSS
growth of one real training step. All numbers come from
`footprint`, measured at two small batch sizes and scaled linearly.

Output: a `complexity` MLflow run (metrics `<model>/...`, CSV tables under `complexity/`), the
same tables as files with --out, and a Markdown summary on the console. See docs/complexity.md.

* `config`: ComplexityConfig (what to analyse), validated on construction.
* `args`: the command-line flags and their parsing into a ComplexityConfig.
* `measure`: preflight and the measurement (`footprint` per model, then `rss_step`).
* `footprint`, `saved_tensors`: the memory model of one model; `rss_step`: the RSS check.
* `tables`: the result as rows, CSV tables and the run's metrics; pure.
* `markdown`: the console summary; pure.
* `__main__`: the run (MLflow, --out files) and the command line.
"""
