"""Each worker's own data shard and its own data order, derived from the seed.

The training set is split once by a seeded permutation into n disjoint, equal shards
(the remainder is dropped). Worker i draws batches from its shard in an order reshuffled
every local epoch by a generator seeded with (seed, i, epoch), so runs are reproducible
and workers never share samples.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from decobench.errors import DecobenchError


def _generator(*entropy: int) -> torch.Generator:
    seed = int(np.random.SeedSequence(list(entropy)).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed & ((1 << 63) - 1))


def check_batch_size(num_samples: int, workers: int, batch_size: int) -> None:
    """Each of the n workers needs a shard of at least one batch: B <= ⌊N / n⌋ (a one-line
    :class:`DecobenchError` naming the largest batch that fits otherwise)."""
    if num_samples < workers:
        raise DecobenchError(f"{num_samples} training samples cannot be split across "
                             f"{workers} workers: use --workers {num_samples} or fewer")
    if batch_size > num_samples // workers:
        raise DecobenchError(f"--batch-size {batch_size} exceeds a worker's shard of "
                             f"{num_samples // workers} samples ({num_samples} samples / "
                             f"{workers} workers): use --batch-size {num_samples // workers} "
                             "or less")


def shard_indices(num_samples: int, workers: int, seed: int) -> Tensor:
    """``[n, num_samples // n]`` disjoint sample indices, one row per worker."""
    check_batch_size(num_samples, workers, 1)
    perm = torch.randperm(num_samples, generator=_generator(seed, 0x5EED))
    per_worker = num_samples // workers
    return perm[: per_worker * workers].view(workers, per_worker)


class ShardedBatches:
    """Yields ``[n, B]`` index batches: row i is worker i's next batch from its shard."""

    def __init__(self, num_samples: int, workers: int, batch_size: int, seed: int) -> None:
        check_batch_size(num_samples, workers, batch_size)
        self.shards = shard_indices(num_samples, workers, seed)
        self.workers, self.batch_size, self.seed = workers, batch_size, seed
        self.epoch = 0
        self._cursor = 0
        self._order = self._shuffle()

    def _shuffle(self) -> Tensor:
        size = self.shards.shape[1]
        orders = [torch.randperm(size, generator=_generator(self.seed, worker, self.epoch))
                  for worker in range(self.workers)]
        return torch.gather(self.shards, 1, torch.stack(orders))

    def next(self) -> Tensor:
        if self._cursor + self.batch_size > self._order.shape[1]:
            self.epoch += 1
            self._cursor = 0
            self._order = self._shuffle()
        batch = self._order[:, self._cursor: self._cursor + self.batch_size]
        self._cursor += self.batch_size
        return batch

    @property
    def iterations_per_epoch(self) -> int:
        return self.shards.shape[1] // self.batch_size
