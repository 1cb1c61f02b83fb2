"""One rank of tests/test_library.py: a tiny model trained with decobench.library on a
gloo process group (the torchrun environment is set by the test)."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

STEPS, BATCH, LR, MOMENTUM = 12, 8, 0.1, 0.9
DECO_STEPS = 80
"""DeCo's run is longer: its first plan waits for a message whose collective took measurably
longer than an empty one, and this 227-parameter model's messages on loopback often do not
(first plans measured at iterations 2 to 27, and twice none within 12)."""


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(BATCH, 10, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def main(mode: str, out: str) -> None:
    from decobench.library import DecoHookState, DecoOptimizerStep, deco_hook

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = model()
    method, options = (("deco-sgd", {"deco_interval": 3}) if mode == "deco"
                       else ("dd-ef-sgd", {"delta": 0.1, "tau": 1}))
    if mode == "hook":
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(net, bucket_cap_mb=64)
        state = DecoHookState(net.parameters(), method=method, options=options)
        net.register_comm_hook(state, deco_hook)
    else:
        step = DecoOptimizerStep(net.parameters(), method=method, options=options)
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    losses, deltas, taus, plans = [], [], [], []
    for k in range(DECO_STEPS if mode == "deco" else STEPS):
        x, y = batch(rank, k)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        if mode == "hook":
            optimizer.step()
            info = state.last
        else:
            info = step(optimizer)
        losses.append(float(loss))
        deltas.append(info.delta)
        taus.append(info.staleness)
        plans.append(info.log.get("plan_bandwidth_mbps"))   # a re-plan's measured bandwidth
    (state if mode == "hook" else step).close()
    params = torch.nn.utils.parameters_to_vector(net.parameters()).tolist()
    with open(f"{out}.rank{rank}.json", "w") as handle:
        json.dump({"losses": losses, "deltas": deltas, "taus": taus, "plans": plans,
                   "params": params}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
