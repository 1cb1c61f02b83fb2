import torch

from decobench.training.sharding import ShardedBatches, shard_indices


def test_shards_are_disjoint_and_equal():
    shards = shard_indices(103, 4, seed=1)
    assert shards.shape == (4, 25)
    assert len(set(shards.flatten().tolist())) == 100


def test_each_worker_draws_only_its_shard_and_reshuffles_per_epoch():
    b = ShardedBatches(40, 2, batch_size=5, seed=3)
    first_epoch = torch.cat([b.next() for _ in range(4)], dim=1)
    for w in range(2):
        assert sorted(first_epoch[w].tolist()) == sorted(b.shards[w].tolist())
    second_epoch = torch.cat([b.next() for _ in range(4)], dim=1)
    assert b.epoch == 1
    assert not torch.equal(first_epoch, second_epoch)


def test_same_seed_same_order_other_seed_other_order():
    a = [ShardedBatches(60, 3, 4, seed=7).next() for _ in range(2)]
    assert torch.equal(a[0], a[1])
    assert not torch.equal(a[0], ShardedBatches(60, 3, 4, seed=8).next())
