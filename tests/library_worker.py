"""One rank of tests/test_library.py: a tiny model trained with decobench.library on a
gloo process group (the torchrun environment is set by the test). Modes ``save`` and
``resume`` are the two legs of the checkpoint check (:func:`resume_main`)."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

STEPS, BATCH, LR, MOMENTUM = 12, 8, 0.1, 0.9
DECO_STEPS = 80
"""DeCo's run is longer: its first plan waits for a message whose collective took measurably
longer than an empty one, and this 227-parameter model's messages on loopback often do not
(first plans measured at iterations 2 to 27, and twice none within 12)."""
RESUME_AT = 5
"""The checkpoint check's stop: after iterations 0-4 at τ = 2 the messages of iterations 3
and 4 are in flight."""


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


def _iterate(net: nn.Module, optimizer: torch.optim.Optimizer, rank: int, k: int,
             step: Any = None) -> Any:
    """One iteration on this rank's batch k: backward, then ``step(optimizer)`` (the
    optimizer-step wrapper; returns its StepInfo) or ``optimizer.step()`` (DDP's hook)."""
    x, y = batch(rank, k)
    optimizer.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    if step is not None:
        return step(optimizer)
    optimizer.step()
    return None


def _vector(net: nn.Module) -> list[float]:
    return torch.nn.utils.parameters_to_vector(net.parameters()).tolist()


def _refusal(load: Any, state: dict) -> str | None:
    """The error ``load(state)`` raises (None: it loaded)."""
    from decobench.errors import DecobenchError

    try:
        load(state)
    except DecobenchError as exc:
        return str(exc)
    return None


def hook_leg(leg: str, out: str, rank: int) -> dict:
    """DD-EF-SGD (δ 0.1, τ 2) through the DDP hook. ``save``: the STEPS iterations without a
    stop, saving the state after RESUME_AT of them; ``resume``: a fresh model, DDP and hook
    state loaded from that file (the other rank's file refused first; the restored state
    written back for the test), then the rest. Returns the final parameters and the
    refusal."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from decobench.library import DecoHookState, deco_hook

    path = f"{out}.hook.rank{rank}.pt"
    saved = torch.load(path) if leg == "resume" else None
    net = model()
    if saved is not None:
        net.load_state_dict(saved["model"])
    ddp = DDP(net, bucket_cap_mb=64)
    state = DecoHookState(ddp.parameters(), method="dd-ef-sgd",
                          options={"delta": 0.1, "tau": 2})
    ddp.register_comm_hook(state, deco_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    first, refused = 0, None
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
        refused = _refusal(state.load_state_dict,
                           torch.load(f"{out}.hook.rank{1 - rank}.pt")["hook"])
        state.load_state_dict(saved["hook"])
        torch.save(state.state_dict(), f"{out}.hook-restored.rank{rank}.pt")
        first = RESUME_AT
    for k in range(first, STEPS):
        _iterate(ddp, optimizer, rank, k)
        if leg == "save" and k + 1 == RESUME_AT:
            torch.save({"hook": state.state_dict(), "model": net.state_dict(),
                        "optimizer": optimizer.state_dict()}, path)
    state.close()
    return {"params": _vector(net), "refused": refused}


def deco_leg(leg: str, out: str, rank: int) -> dict:
    """DeCo-SGD through the optimizer-step wrapper. ``save``: trains until 3 iterations
    after DeCo's first plan (the ranks agree on it; at most DECO_STEPS - 1), saves, then runs
    one more iteration; ``resume``: loads that file and runs that iteration. Returns that
    iteration's StepInfo and the parameters after it (and, resumed, the refusal of a second
    load after it)."""
    from decobench.library import DecoOptimizerStep

    path = f"{out}.deco.rank{rank}.pt"
    saved = torch.load(path) if leg == "resume" else None
    net = model()
    if saved is not None:
        net.load_state_dict(saved["model"])
    step = DecoOptimizerStep(net.parameters(), method="deco-sgd", options={"deco_interval": 3})
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
        step.load_state_dict(saved["step"])
        torch.save(step.state_dict(), f"{out}.deco-restored.rank{rank}.pt")
        stop = saved["stop"]
    else:
        planned = None
        for k in range(DECO_STEPS - 1):
            info = _iterate(net, optimizer, rank, k, step)
            if planned is None and "plan_bandwidth_mbps" in info.log:
                planned = k
            if planned is not None and k == planned + 2:
                break
        stop = k + 1
        torch.save({"step": step.state_dict(), "model": net.state_dict(),
                    "optimizer": optimizer.state_dict(), "stop": stop}, path)
    info = _iterate(net, optimizer, rank, stop, step)
    late = None if saved is None else _refusal(step.load_state_dict, saved["step"])
    step.close()
    return {"stop": stop, "delta": info.delta, "staleness": info.staleness,
            "bits": info.bits_per_worker, "applied": info.applied_messages, "log": info.log,
            "params": _vector(net), "late": late}


def resume_main(leg: str, out: str) -> None:
    """One leg of the checkpoint check (``save`` or ``resume``, each its own processes and
    process group): :func:`hook_leg`, then :func:`deco_leg`."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"hook": hook_leg(leg, out, rank), "deco": deco_leg(leg, out, rank)}
    with open(f"{out}.{leg}.rank{rank}.json", "w") as handle:
        json.dump(result, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    (resume_main if sys.argv[1] in ("save", "resume") else main)(sys.argv[1], sys.argv[2])
