"""Where a run's model and gradients live (``--device``, :attr:`RunConfig.device`).

``auto`` takes the first CUDA GPU that torch sees and the CPU otherwise; ``cpu``, ``cuda``
and ``cuda:N`` are taken as given. A GPU asked for where torch sees none is bad input: one
line before training (exit status 2), never a silent fall-back to the CPU, which would run a
GPU-sized suite hundreds of times slower than its documented cost (README "GPU tier").
"""

from __future__ import annotations

import torch

from decobench.errors import DecobenchError


def resolve_device(name: str) -> torch.device:
    """The torch device that ``name`` (auto, cpu, cuda or cuda:N) stands for here."""
    if name == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = visible_gpus()
        if count == 0:
            why = ("this torch is a CPU build" if torch.version.cuda is None else
                   "no GPU is visible to this CUDA build (driver, CUDA_VISIBLE_DEVICES)")
            raise DecobenchError(f"--device {name}: torch {torch.__version__} sees no CUDA "
                                 f"GPU here: {why}; use --device cpu or auto")
        index = 0 if device.index is None else device.index
        if index >= count:
            raise DecobenchError(f"--device {name}: torch sees {count} CUDA GPU(s), "
                                 f"cuda:0 to cuda:{count - 1}")
        return torch.device("cuda", index)
    return device


def describe(device: torch.device) -> str:
    """``device`` for ``config.yaml``: ``cpu``, or ``cuda:N (GPU name)``."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def set_matmul_precision(device: torch.device, requested: str) -> str:
    """Apply ``--matmul-precision`` for a run on ``device`` and return what float32 matrix
    products use, for ``config.yaml``. On a GPU, auto means ``high`` (TensorFloat-32: a
    10-bit mantissa inside the products, float32 sums; PyTorch's default is ``highest``).
    On the CPU it is always torch's default, ``highest``, whatever an earlier run in the same
    process (a sweep worker) set: ``high`` could route CPU products through oneDNN's
    reduced-precision paths and change the results the project pins."""
    if device.type != "cuda":
        torch.set_float32_matmul_precision("highest")
        return "highest (CPU)"
    torch.set_float32_matmul_precision("high" if requested == "auto" else requested)
    return torch.get_float32_matmul_precision()


def visible_gpus() -> int:
    """CUDA GPUs torch sees here (0 on a CPU build or a machine without one)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_jobs(cpus: int | None) -> int:
    """A sweep's parallel runs when ``--jobs`` is not given: one per GPU where torch sees
    any (each worker process gets its own, :func:`decobench.sweeps.cell.init_worker`), else one
    per CPU core."""
    return visible_gpus() or cpus or 1
