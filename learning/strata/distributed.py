"""Data parallelism for the StraTA trainer: one process per device under `accelerate launch`.

    accelerate launch --multi_gpu --num_processes 8 -m api train rl ...   (one node, eight GPUs: NCCL)
    accelerate launch --multi_gpu --num_processes 2 -m api train rl ...   (no GPU: two CPU processes, gloo)

accelerate 1.15's `--cpu` flag starts ONE process unless it is given an MPI host file (its
`simple_launcher`), so CPU data parallelism goes through the torchrun launcher that `--multi_gpu`
selects; with no CUDA device each process then joins a gloo group.

accelerate starts the processes and, through `PartialState`, the torch.distributed process group
(NCCL on GPUs, gloo on the CPU) and each process's device. What is learned stays in our code:
each rank rolls out its shard of the step's merge requests; the group filter sees every rank's
groups (gathered, in the single-process order), so it keeps what one process would keep; each rank's
token-mean loss is weighted by its share of the step's tokens and the gradients are summed with
`all_reduce`, so the update is the one a single process would make on the same rollouts (with
`minibatch_size` unset). Rank 0 alone writes checkpoints, step metrics and the run's record.
Without a launcher (WORLD_SIZE unset or 1) everything here is a no-op.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the group (rank 0 of 1 when not launched in parallel)."""

    rank: int = 0
    world_size: int = 1

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls) -> DataParallel:
        """Join the process group a launcher set up (WORLD_SIZE > 1), via accelerate; else a single process."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        import torch
        from accelerate import PartialState

        # accelerate reads the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR), initialises
        # torch.distributed (NCCL, or gloo on the CPU) and pins each rank to its own GPU.
        state = PartialState(cpu=not torch.cuda.is_available())
        return cls(rank=state.process_index, world_size=state.num_processes)

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's items: every world_size-th, starting at its rank."""
        return list(items)[self.rank :: self.world_size]

    def unshard(self, per_rank: Sequence[Sequence[T]]) -> list[T]:
        """Put gathered shards back in the original order (the inverse of `shard` over all ranks)."""
        total = sum(len(p) for p in per_rank)
        out: list[Any] = [None] * total
        for rank, part in enumerate(per_rank):
            for i, item in enumerate(part):
                out[rank + i * self.world_size] = item
        return out

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, by rank, on every rank."""
        if not self.active:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def sum(self, value: float) -> float:
        return float(sum(self.gather(value)))

    def sum_gradients(self, parameters: Sequence[Any]) -> None:
        """Sum each parameter's gradient over the ranks (a rank without one contributes zeros)."""
        if not self.active:
            return
        import torch
        import torch.distributed as dist

        for p in parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def broadcast_parameters(self, parameters: Sequence[Any]) -> None:
        """Start every rank from rank 0's weights (a fresh LoRA is random)."""
        if not self.active:
            return
        import torch.distributed as dist

        for p in parameters:
            dist.broadcast(p.data, src=0)

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()
