"""Run under torchrun (2 processes) by tests/test_distributed.py: after two steps together, rank 1
runs ZeRO steps alone under train.distributed.engines.skip_collectives while rank 0 waits in a
barrier. A collective left in the step would wait for rank 0 until the 20 s timeout and fail.
Prints one line per rank: `rank <r> ok <steps alone>`. Argument: the ZeRO stage."""

from __future__ import annotations

import contextlib
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")


def main() -> None:
    import torch

    from train.bench import preflight, prepare
    from train.config import TrainConfig
    from train.distributed import engines
    from train.distributed.context import job_env, start
    from train.step import train_step

    env = job_env()
    cfg = TrainConfig(
        model="resnet18",
        batch_size=2,
        image_size=32,
        device="cpu",
        distributed="deepspeed",
        zero_stage=int(sys.argv[1]),
        world_size=env.world_size,
        collective_timeout_s=20,
        env_label="test",
    )
    ctx = start(cfg, preflight(cfg), env)
    prep = prepare(cfg, ctx.device)
    sync = engines.wrap(prep, cfg, ctx)
    x, y = prep.source.next()
    for _ in range(2):
        train_step(prep.parts, x, y)
    ctx.barrier()
    alone = 0
    if ctx.rank == 1:
        prep.parts.grad_sync = sync.no_sync
        for _ in range(3):
            train_step(prep.parts, x, y)
            alone += 1
        prep.parts.grad_sync = contextlib.nullcontext
        finite = all(bool(torch.isfinite(p).all()) for p in prep.model.parameters())
        assert finite, "non-finite parameters after the skipped steps"
    ctx.barrier()
    train_step(prep.parts, x, y)  # together again: the real collectives are back
    print(f"rank {ctx.rank} ok {alone}", flush=True)
    ctx.close()


if __name__ == "__main__":
    main()
