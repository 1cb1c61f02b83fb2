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


def _generator(*entropy: int) -> torch.Generator:
    seed = int(np.random.SeedSequence(list(entropy)).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed & ((1 << 63) - 1))


def shard_indices(num_samples: int, workers: int, seed: int) -> Tensor:
    """``[n, num_samples // n]`` disjoint sample indices, one row per worker."""
    if num_samples < workers:
        raise ValueError(f"{num_samples} samples cannot be split across {workers} workers")
    perm = torch.randperm(num_samples, generator=_generator(seed, 0x5EED))
    per_worker = num_samples // workers
    return perm[: per_worker * workers].view(workers, per_worker)


class ShardedBatches:
    """Yields ``[n, B]`` index batches: row i is worker i's next batch from its shard."""

    def __init__(self, num_samples: int, workers: int, batch_size: int, seed: int) -> None:
        self.shards = shard_indices(num_samples, workers, seed)
        if batch_size > self.shards.shape[1]:
            raise ValueError(f"batch size {batch_size} exceeds a worker's shard "
                             f"({self.shards.shape[1]} samples)")
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
