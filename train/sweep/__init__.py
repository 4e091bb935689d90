"""`python -m train.sweep`: a matrix of training benchmarks with repeats, safe to interrupt and resume.

One parent `sweep` run; one child `train` run per configuration and repeat. A configuration that
fails (out of memory, unsupported precision, ...) becomes a FAILED child with the reason and the
sweep goes on. Running the same sweep again skips every (configuration, repeat) already FINISHED
for this environment label on the tracking server (or kept offline in the spool) and redoes the
rest; a configuration is every TrainConfig field but env_label (`sweep_key`). See docs/sweep.md.

* `spec`: what to run (SweepSpec, the checked Plan, sweep_key, sweep files); pure.
* `state`: what is done (server, spool and ledger reconciled), and the housekeeping of a resume.
* `runner`: `run_sweep`, the parent and its children.
* `summary`: the outcomes, their counts, summary.csv, the console table; pure.
* `__main__`: the command line.
"""
