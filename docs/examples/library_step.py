"""DeCo-SGD in a training loop of your own: each rank learns a toy task (the labels a fixed
random linear map gives 784 features) from its own shard. From the repository root:

    torchrun --nproc-per-node 2 docs/examples/library_step.py
"""

import torch
import torch.distributed as dist

from decobench.library import DecoOptimizerStep


def toy_shard(batches: int = 101, size: int = 64):
    """This rank's batches: random inputs, labelled by ``teacher``."""
    data = torch.Generator().manual_seed(1 + dist.get_rank())
    for _ in range(batches):
        x = torch.randn(size, 784, generator=data)
        yield x, teacher(x).argmax(1)


dist.init_process_group("gloo")                      # or "nccl"; torchrun sets the rest
torch.manual_seed(0)                                 # the same model on every rank
model = torch.nn.Linear(784, 10)
teacher = torch.nn.Linear(784, 10).requires_grad_(False)
my_loader = toy_shard()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)   # momentum: docs/library.md
step = DecoOptimizerStep(model.parameters(), method="deco-sgd",
                         options={"deco_interval": 25, "delta_min": 0.01})
for k, (x, y) in enumerate(my_loader):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    info = step(optimizer)                           # .grad <- the update due now; steps
    if k % 50 == 0:
        print(f"iteration {k}: loss {loss.item():.3f}, δ {info.delta:.4f}, τ {info.staleness}")
step.close()                                         # after the last iteration, every rank
dist.destroy_process_group()
