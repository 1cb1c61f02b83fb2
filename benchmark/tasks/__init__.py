"""Task registry: ``get_task(name)``.

Tasks are found through the ``decobench.tasks`` entry points (:mod:`decobench.registry`);
the four shipped tasks register there too (``pyproject.toml``). A task is a model, its data
and its profiles (docs/tasks/); the stand-in and slice builders live beside them.

May import: the foundation, ``decobench.netem``, ``clock``, ``planning``, ``compression``
and ``methods`` (none needs more than the foundation today).
"""

from __future__ import annotations

from decobench.registry import TASKS_GROUP, Registry
from decobench.tasks.base import Task, TaskData, TaskProfile, TensorData, parameter_count


def _task_name(obj: object) -> str:
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TypeError(f"expected a decobench.tasks.Task subclass, got {obj!r}")
    return obj.name


TASKS: Registry[type[Task]] = Registry(TASKS_GROUP, "task", _task_name)
"""Every task ``decobench run --task`` accepts (entry points of group ``decobench.tasks`` and
:func:`register_task` additions)."""


def register_task(cls: type[Task]) -> type[Task]:
    """Add a task class in this process without packaging it (usable as a decorator)."""
    return TASKS.register(cls)


def get_task(name: str) -> Task:
    return TASKS.get(name)()


__all__ = ["TASKS", "Task", "TaskData", "TaskProfile", "TensorData", "get_task",
           "parameter_count", "register_task"]
