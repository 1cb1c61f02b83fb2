"""Task registry: ``get_task(name)``."""

from __future__ import annotations

from benchmark.errors import DecobenchError
from benchmark.tasks.base import Task, TaskData, TaskProfile, TensorData, parameter_count
from benchmark.tasks.cnn_cifar10 import CnnCifar10
from benchmark.tasks.cnn_fmnist import CnnFashionMnist
from benchmark.tasks.gpt2_wikitext import Gpt2WikiText
from benchmark.tasks.vit_imagenet import VitImageNet

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (CnnFashionMnist, CnnCifar10, VitImageNet, Gpt2WikiText)}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise DecobenchError(f"unknown task {name!r}; available tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]()


__all__ = ["TASKS", "Task", "TaskData", "TaskProfile", "TensorData", "get_task",
           "parameter_count"]
