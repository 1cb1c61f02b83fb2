"""What ``decobench run``'s parser needs to know of the registered tasks and methods (names,
one-line descriptions, each method's option fields), cached so that ``--help`` and the
errors found at the edge answer without importing the task and method modules (which
import torch: about 4 s on 2 cores).

The cache (``$DECOBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/decobench``, else
``~/.cache/decobench``: ``cli-metadata.json``) holds the metadata with what it was read
from: the entry points of the ``decobench.methods`` and ``decobench.tasks`` groups (name,
target, distribution and version) and every source file the collection imported from
decobench or a plugin package (path, modification time, size). It is used only while all of
that is unchanged, so editing a method's options, installing a plugin or upgrading a
package re-reads it; if the registries are already imported in this process (or a method
was registered in-process), they are read directly. A cache that cannot be written is
skipped silently: it only saves time.
"""

from __future__ import annotations

import json
import os
import sys
import types
import typing
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from decobench.atomicio import write_text_atomic

CACHE_FORMAT = 1
GROUPS = ("decobench.methods", "decobench.tasks")


def cache_path() -> Path:
    root = os.environ.get("DECOBENCH_CACHE_DIR")
    if root:
        return Path(root) / "cli-metadata.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "decobench" / "cli-metadata.json"


def _entry_point_key() -> list[list[str]]:
    key = []
    for group in GROUPS:
        for entry in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
            dist = entry.dist
            key.append([group, entry.name, entry.value, dist.name if dist else "",
                        dist.version if dist else ""])
    return key


def _source_files(packages: set[str]) -> list[list[Any]]:
    """(path, mtime_ns, size) of every imported module file of ``packages``."""
    files = []
    for name, module in sorted(sys.modules.items()):
        if name.split(".")[0] not in packages:
            continue
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            stat = os.stat(path)
            files.append([path, stat.st_mtime_ns, stat.st_size])
    return files


def _unchanged(files: list[list[Any]]) -> bool:
    for path, mtime_ns, size in files:
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if stat.st_mtime_ns != mtime_ns or stat.st_size != size:
            return False
    return True


def _option_kind(annotation: Any) -> tuple[str, list[str] | None]:
    """``bool``, ``int``, ``float`` or ``str`` and the choices of an options field
    (``X | None`` is X)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            annotation = inner[0]
    if typing.get_origin(annotation) is typing.Literal:
        return "str", [str(a) for a in typing.get_args(annotation)]
    for kind in (bool, int, float):
        if annotation is kind:
            return kind.__name__, None
    return "str", None


def collect() -> dict[str, Any]:
    """The metadata, read from the registries (imports every task and method)."""
    from decobench.clock.regime import REGIME_ALIASES
    from decobench.methods import method_specs
    from decobench.tasks import TASKS

    methods = {}
    for name, spec in sorted(method_specs().items()):
        options = {}
        for field, info in spec.options.model_fields.items():
            kind, choices = _option_kind(info.annotation)
            options[field] = {"kind": kind, "choices": choices,
                              "default": "unset" if info.default is None else str(info.default),
                              "description": info.description or ""}
        shipped = getattr(spec.build, "__module__", "").startswith("decobench.")
        methods[name] = {"summary": spec.summary, "options": options,
                         "card": f"docs/methods/{name}.md" if shipped else None}
    tasks = {name: cls.description for name, cls in sorted(TASKS.all().items())}
    return {"tasks": tasks, "methods": methods, "regimes": dict(sorted(REGIME_ALIASES.items()))}


def _registered_in_process() -> bool:
    """The registries are imported here already (reading them costs nothing more, and an
    in-process registration is seen)."""
    return "decobench.methods" in sys.modules or "decobench.tasks" in sys.modules


def run_metadata() -> dict[str, Any]:
    """The metadata: from the cache when it is current, else collected (and cached)."""
    if _registered_in_process():
        return collect()
    path = cache_path()
    key = _entry_point_key()
    try:
        cached = json.loads(path.read_text())
        if (cached.get("format") == CACHE_FORMAT and cached.get("entry_points") == key
                and cached.get("python") == sys.version and _unchanged(cached["files"])):
            return cached["metadata"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    metadata = collect()
    packages = {"decobench"} | {value.split(":")[0].split(".")[0] for _, _, value, _, _ in key}
    record = {"format": CACHE_FORMAT, "python": sys.version, "entry_points": key,
              "files": _source_files(packages), "metadata": metadata}
    try:
        write_text_atomic(path, json.dumps(record))
    except OSError:
        pass
    return metadata
