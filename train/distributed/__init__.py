"""Data-parallel training benchmarks: `torchrun --nproc-per-node N -m train --distributed ddp|deepspeed`.

Every rank runs the same prepared step (train/bench.py, train/step.py) inside a data-parallel
engine; rank 0 gathers what the ranks measured and is the only process that touches the tracking
store. See docs/distributed.md.

* `context`: the job as this process sees it (rank, world size, device, backend, every rank's host
  and pid), the process group with its collective timeout, and the collectives the harness uses.
* `engines`: DDP or DeepSpeed around the prepared model, and how each times a step without
  gradient synchronisation (or why it cannot).
* `measure`: the distributed benchmark (synchronised steps, then compute-only steps), the
  gathered per-rank records and the metrics made from them; pure maths apart from the steps.
* `failures`: any rank failing ends the job with that rank's one-line reason: the failure board
  (torchrun's store), the rule that blames a rank, and the SIGTERM watcher.
* `launch`: a configuration as one torchrun job (a sweep child) and its result file.
"""
