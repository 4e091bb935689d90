"""The job as this process sees it, and the few collectives the harness itself runs.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (and MASTER_ADDR/PORT of its
store). Without them (`python -m train --distributed ddp` alone) the job is one process with a
process group of its own: a world-size-1 run of the engine. The process group is created here, with
the configuration's collective timeout, for DDP and DeepSpeed alike (DeepSpeed adopts it).
"""

from __future__ import annotations

import atexit
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from common.errors import BenchError, UsageError, one_line
from train import device as dev
from train.config import TrainConfig


@dataclass
class RankInfo:
    """Who a rank is: where it runs and its process id (to tell a dead rank from a silent one)."""

    rank: int
    host: str
    pid: int
    device: str


@dataclass
class JobEnv:
    """What torchrun (or its absence) tells this process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    torchrun: bool = False


def job_env(environ=os.environ) -> JobEnv:
    """This process's place in the job, from torchrun's environment variables (one process when
    they are absent). Malformed values are a UsageError."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return JobEnv()
    try:
        env = JobEnv(
            rank=int(environ["RANK"]),
            world_size=int(environ["WORLD_SIZE"]),
            local_rank=int(environ.get("LOCAL_RANK", environ["RANK"])),
            local_world_size=int(environ.get("LOCAL_WORLD_SIZE", environ["WORLD_SIZE"])),
            torchrun=True,
        )
    except ValueError:
        raise UsageError(
            "RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE must be integers (torchrun sets them)"
        ) from None
    if not 0 <= env.rank < env.world_size:
        raise UsageError(f"RANK {env.rank} is outside WORLD_SIZE {env.world_size}")
    return env


@dataclass
class DistContext:
    """An initialised data-parallel job, from this rank's point of view."""

    env: JobEnv
    backend: str
    device: object
    ranks: list[RankInfo] = field(default_factory=list)
    """every rank's RankInfo, by rank (gathered once at the start)"""

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def nodes(self) -> int:
        """Distinct hosts among the ranks."""
        return len({r.host for r in self.ranks})

    def gather(self, obj) -> list:
        """`obj` from every rank, by rank, on every rank (one all_gather_object)."""
        import torch.distributed as dist

        out: list = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def gathered(self) -> None:
        """Rank 0 says, through the job's key-value store, that its gather is complete; the other
        ranks wait for that before going on. Without it a rank that finished its part of the
        all_gather could exit and close its gloo connections while rank 0 was still reading
        (rank 0 then saw a closed connection and blamed a rank that had done nothing wrong)."""
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()  # its timeout: the collective timeout
        key = "roofline_gathered"
        if self.rank == 0:
            store.set(key, "1")
        else:
            store.wait([key])

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def close(self) -> None:
        """Destroy the process groups while the interpreter is whole (`release_groups`)."""
        release_groups()


def release_groups() -> None:
    """Destroy every process group and drop every reference to one, then collect: the groups'
    objects must die while the interpreter is whole. One that died during interpreter shutdown
    (DeepSpeed keeps its groups in module globals and its engine in reference cycles) had gloo
    worker threads take the GIL as they freed their last work; a thread that asks for the GIL while
    Python finalizes is ended with a forced unwind, which C++ turns into `terminate called without
    an active exception` (exit -6) after the rank's work was done: a flaky abort.
    Also run at exit (registered by `start`), when the engine, out of scope, is collectable."""
    import gc
    import sys

    import torch.distributed as dist

    ds = sys.modules.get("deepspeed.comm.comm")
    if ds is not None and getattr(ds, "cdb", None) is not None and dist.is_initialized():
        ds.destroy_process_group()  # torch's, then DeepSpeed's own references to the groups
    elif dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def check_device_flag(cfg: TrainConfig, env: JobEnv) -> None:
    """An explicit --device cuda:N pins every process of a node to one GPU: refused when a node
    runs several processes (each takes cuda:LOCAL_RANK with --device cuda or auto)."""
    if cfg.device.startswith("cuda:") and env.local_world_size > 1:
        raise UsageError(
            f"--device {cfg.device} with {env.local_world_size} processes per node: use --device "
            "cuda (each process takes cuda:LOCAL_RANK)"
        )


def start(cfg: TrainConfig, device, env: JobEnv) -> DistContext:
    """Create the process group (cfg.backend, already resolved by train.bench.preflight; timeout
    cfg.collective_timeout_s) and gather every rank's RankInfo. `device` is the preflight's; the
    rank's own device is cuda:LOCAL_RANK on CUDA."""
    import torch
    import torch.distributed as dist

    check_device_flag(cfg, env)
    device = dev.rank_device(device, env.local_rank, env.local_world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=cfg.collective_timeout_s)
    try:
        if env.torchrun:
            dist.init_process_group(cfg.backend, timeout=timeout)
        else:  # one process, a group of its own on a free local port
            dist.init_process_group(
                cfg.backend,
                init_method=f"tcp://127.0.0.1:{free_port()}",
                rank=0,
                world_size=1,
                timeout=timeout,
            )
    except Exception as exc:  # noqa: BLE001 - rendezvous and backend failures: one line
        raise BenchError(
            f"cannot create the {cfg.backend} process group (rank {env.rank} of {env.world_size}): "
            f"{one_line(exc)}"
        ) from exc
    atexit.unregister(release_groups)  # once per process
    atexit.register(release_groups)  # runs before interpreter shutdown; harmless after close()
    ctx = DistContext(env, cfg.backend, device)
    ctx.ranks = ctx.gather(RankInfo(env.rank, socket.gethostname(), os.getpid(), str(device)))
    return ctx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
