"""One process of a data-parallel job: `python -m train --distributed ddp|deepspeed` under torchrun
(or alone, as a world-size-1 job).

Every rank measures; rank 0 alone holds the run (or, in a sweep's job, writes the result file),
and ends it FAILED naming the rank when any rank fails (train.distributed.failures).
"""

from __future__ import annotations

import os

from common import console
from common.errors import EXIT_USAGE, BenchError, UsageError, one_line
from train.bench import preflight
from train.config import TrainConfig
from train.distributed import context
from train.distributed.failures import Guard
from train.distributed.launch import write_result
from train.distributed.measure import run_distributed_benchmark
from train.profile_mode import ProfileMode, check_profile_mode, profile_ranks, require_cuda
from train.run import RunOptions, run
from train.result_text import say_result


def run_rank(
    cfg: TrainConfig,
    options: RunOptions,
    profile: ProfileMode | None = None,
    result_file: str | None = None,
) -> int:
    """This rank's part of the job: profile mode on every rank, else measure on every rank and, on
    rank 0, the run (or, with `result_file`, a sweep child's record written there)."""
    env = context.job_env()
    if env.rank != 0:
        os.environ.pop("MLFLOW_RUN_ID", None)  # only rank 0 touches the tracking store
    cfg.world_size = env.world_size
    with console.quiet(env.rank != 0):
        try:
            if profile:  # bad flags and no GPU first, before any process group
                check_profile_mode(cfg, profile.steps)
                require_cuda()
            device = preflight(cfg)
        except UsageError:
            if env.rank != 0:
                return EXIT_USAGE  # every rank sees the same bad input; rank 0 says it
            raise
        ctx = context.start(cfg, device, env)
        try:
            with Guard(ctx) as guard:

                def measure(cfg, device, progress=True):
                    return guard.blamed(lambda: run_distributed_benchmark(cfg, ctx, progress))

                if profile:
                    return profile_ranks(cfg, profile, ctx, guard)
                if ctx.rank != 0:
                    measure(cfg, ctx.device)
                    return 0
                if result_file:
                    return _job_of_sweep(cfg, result_file, measure, guard)
                session, result = run(cfg, options, measure=measure, guard=guard)
        finally:
            ctx.close()
    say_result(session)
    return 0


def _job_of_sweep(cfg: TrainConfig, path: str, measure, guard) -> int:
    """Rank 0 of a sweep child's torchrun job: the record (or the failure) into `path`; the sweep's
    process logs it (train.distributed.launch.run_job)."""

    def end(status: str, reason: str) -> None:
        write_result(path, None, status, reason)

    with guard.hold(end):
        try:
            with guard.released():
                result = measure(cfg, None, progress=False)
        except BenchError as err:
            write_result(path, None, "FAILED", one_line(err))
            raise
        write_result(path, result)
    return 0
