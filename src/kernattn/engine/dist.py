"""Data parallelism for the one loop: the world a training process belongs to, the process
group's start and end, each rank's share of a batch or of the validation set, and the
reductions that make every rank agree.

    world = world_from_env()            # torchrun's RANK/WORLD_SIZE/LOCAL_RANK, or srun's SLURM_*
    with process_group(world, device, timeout_s):
        ...                             # gloo on CPU, NCCL on CUDA; nothing at all for one process

A step's global batch is drawn whole, identically, on every rank (the draw's generator has the
same state everywhere, so the data position is one state, the one rank 0 checkpoints), then
split into world x grad_accum shards: micro-batch m of rank r is shard m x world + r, the
positions shard, shard + S, shard + 2S, ... of the batch (S shards). One rank with twice the
accumulation therefore sees the same shards as two ranks, and an image repeated in a row
(DeiT's repeated augmentation) lands on different ranks, as DeiT's RASampler places it. The
validation set is split the same way, position i to rank i mod world: every item once, no
padding; sums are reduced, then divided.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import UsageError


@dataclasses.dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def _ints(env, names: tuple[str, ...]) -> list[int]:
    values = []
    for name in names:
        try:
            values.append(int(env[name]))
        except ValueError:
            raise UsageError(f"the environment variable {name}={env[name]!r} is not an integer; "
                             f"start the ranks with torchrun or srun, which set it") from None
    return values


def world_from_env(env=None) -> World:
    """torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK); else srun's (SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID) when the job script names the rendezvous (MASTER_ADDR): a batch
    script's own process, which SLURM gives the same variables, is not a rank; else one process."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, size = _ints(env, ("RANK", "WORLD_SIZE"))
        local = _ints(env, ("LOCAL_RANK",))[0] if "LOCAL_RANK" in env else 0
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "MASTER_ADDR" in env:
        rank, size = _ints(env, ("SLURM_PROCID", "SLURM_NTASKS"))
        local = _ints(env, ("SLURM_LOCALID",))[0] if "SLURM_LOCALID" in env else 0
        os.environ.setdefault("MASTER_PORT", "29500")
    else:
        return World()
    if size < 1 or not 0 <= rank < size:
        raise UsageError(f"rank {rank} of a world of {size} processes is not a rank; start the ranks with "
                         f"torchrun or srun, which number them 0 .. size - 1")
    return World(rank, size, local)


def device_of(world: World, device: torch.device) -> torch.device:
    """Rank's device: its node-local GPU under CUDA."""
    if device.type == "cuda" and world.size > 1:
        return torch.device("cuda", world.local_rank)
    return device


@contextlib.contextmanager
def process_group(world: World, device: torch.device, timeout_s: float) -> Iterator[None]:
    """torch.distributed for the loop's lifetime (nothing for one process). A collective that
    waits longer than timeout_s (a rank died, a node hangs) raises, so no rank waits for the
    job's time limit. Inside a group already started (a study that fine-tunes several runs in
    one process holds one group for all of them: kernattn prune) it starts none and ends none."""
    if world.size == 1:
        yield
        return
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return

    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=world.rank, world_size=world.size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        yield
    finally:
        dist.destroy_process_group()


def _live(world: World) -> bool:
    import torch.distributed as dist

    return world.size > 1 and dist.is_initialized()


def reduce_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    """`values` summed over the ranks (in place; the same tensor for one process)."""
    if _live(world):
        import torch.distributed as dist

        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def any_rank(flag: bool, world: World, device: torch.device) -> bool:
    """True on every rank when `flag` is True on one of them."""
    if not _live(world):
        return flag
    return bool(reduce_sum(torch.tensor([float(flag)], device=device), world).item() > 0)


def gather(obj: Any, world: World) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not _live(world):
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: Any, world: World) -> Any:
    """Rank 0's `obj` on every rank."""
    if not _live(world):
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shard(items, micro: int, world: World, grad_accum: int):
    """Rank's micro-batch `micro` of a step's global batch `items` (module docstring)."""
    shards = world.size * grad_accum
    return items[micro * world.size + world.rank::shards]


def val_share(items, world: World):
    """Rank's share of the validation items: positions rank, rank + size, ..."""
    return items[world.rank::world.size]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a step's items lie, which the engine derives and a track reads (Track.layout): the
    world, and on each rank `grad_accum` micro-batches of `micro_batch` items (global batch =
    micro x accum x world size). The default: one process, one micro-batch of the whole step."""

    world: World = World()
    micro_batch: int | None = None
    grad_accum: int = 1


def layout(global_batch: int, micro_batch: int | None, world: World, where: str) -> Layout:
    """The layout of `global_batch` items over `world`; `micro_batch` None: the rank's share in
    one micro-batch. A batch that does not divide is one line naming `where` and the fix."""
    per_rank, rest = divmod(global_batch, world.size)
    micro = per_rank if micro_batch is None else micro_batch
    if rest or micro < 1 or per_rank % micro:
        raise UsageError(f"{where}: the global batch {global_batch} does not divide over {world.size} ranks"
                         + ("" if micro_batch is None else f" in micro-batches of {micro_batch}")
                         + "; change the batch or the number of GPUs (--nproc, the profile's gpus)")
    return Layout(world, micro, per_rank // micro)
