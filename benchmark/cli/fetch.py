"""``decobench data fetch --config RUN.yaml``: load a run's task data once, before its
workers start (the Docker stack's one-shot ``data`` service runs it), downloading it into
the cache when the run config has no ``data_root``, else checking the given folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from decobench.errors import DecobenchError
from decobench.runs.config import load_yaml_config
from decobench.tasks import get_task


def fetch_run_data(config_path: str | Path) -> str:
    """Load the data of the run config at ``config_path`` (its ``task``, ``data_root``,
    ``profile`` and ``dataset``); returns the task's name."""
    config = load_yaml_config(config_path)
    if "task" not in config:
        raise DecobenchError(f"--config {config_path}: no task given")
    task = get_task(config["task"])
    root = Path(config["data_root"]) if config.get("data_root") else None
    variant = task.dataset_variant(config.get("dataset"))
    task.check_data(root, root is None, variant)       # names the folder and what is missing
    try:
        task.load_data(root, root is None, task.profile(config.get("profile") or "paper"),
                       variant)
    except (RuntimeError, OSError) as exc:
        raise DecobenchError(f"could not load data for task {task.name}: {exc}") from exc
    return task.name


def cmd_fetch(args: argparse.Namespace) -> int:
    print(f"data for {fetch_run_data(args.config)}: ready", flush=True)
    return 0
