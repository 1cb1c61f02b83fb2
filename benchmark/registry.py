"""Open registries: methods and tasks are found through Python entry points.

A package joins a registry by declaring an entry point in its ``pyproject.toml``; the
shipped methods and tasks register the same way (decobench's own ``pyproject.toml``)::

    [project.entry-points."decobench.methods"]
    my-method = "my_package.method:MY_SPEC"       # a decobench.methods.MethodSpec

    [project.entry-points."decobench.tasks"]
    my-task = "my_package.task:MyTask"             # a decobench.tasks.Task subclass

The entry point's name is the name users type (``--method my-method``) and must equal the
object's own ``name``. Entry points are read from the installed metadata
(:func:`importlib.metadata.entry_points`) each time a registry is asked, and an entry is
imported only when it is needed, so a broken plugin fails with one line naming it and its
package, never the other methods. :meth:`Registry.register` adds an object in-process
(a notebook, a test) without packaging it; it shadows an entry point of the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from decobench.errors import DecobenchError

T = TypeVar("T")

METHODS_GROUP = "decobench.methods"
TASKS_GROUP = "decobench.tasks"


def _origin(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    package = f"package {dist.name} {dist.version}" if dist is not None else "an unknown package"
    return f"entry point {entry.name} = {entry.value} ({package})"


@dataclass
class Registry(Generic[T]):
    """Named objects of one kind, from entry points of ``group`` plus in-process additions.

    ``check(obj)`` returns the object's own name, or raises ``TypeError`` (or
    ``AttributeError``) saying what the entry point should have been.
    """

    group: str
    kind: str
    check: Callable[[object], str]
    registered: dict[str, T] = field(default_factory=dict)

    def _entries(self) -> dict[str, list[EntryPoint]]:
        found: dict[str, list[EntryPoint]] = {}
        for entry in entry_points(group=self.group):
            found.setdefault(entry.name, []).append(entry)
        return found

    def names(self) -> list[str]:
        """Every registered name, sorted (nothing is imported)."""
        return sorted(set(self._entries()) | set(self.registered))

    def register(self, obj: T) -> T:
        """Add ``obj`` in this process under its own name; returns it (usable as a decorator)."""
        name = self._checked(obj, f"register({obj!r})")
        self.registered[name] = obj
        return obj

    def get(self, name: str) -> T:
        """The object registered as ``name``; one-line :class:`DecobenchError` otherwise."""
        return self._get(name, self._entries())

    def _get(self, name: str, found: dict[str, list[EntryPoint]]) -> T:
        if name in self.registered:
            return self.registered[name]
        entries = found.get(name)
        if not entries:
            known = sorted(set(found) | set(self.registered))
            raise DecobenchError(f"unknown {self.kind} {name!r}; available {self.kind}s: "
                                 f"{', '.join(known) or 'none'}")
        distinct = {(e.value, getattr(getattr(e, "dist", None), "name", None)) for e in entries}
        if len(distinct) > 1:
            raise DecobenchError(
                f"{self.kind} {name!r} is registered twice ({'; '.join(map(_origin, entries))}): "
                "uninstall or rename one")
        entry = entries[0]
        try:
            obj = entry.load()
        except Exception as exc:  # noqa: BLE001 - any import error of a plugin is reported
            raise DecobenchError(f"{self.kind} {name!r} failed to load from {_origin(entry)}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        own = self._checked(obj, _origin(entry))
        if own != name:
            raise DecobenchError(f"{_origin(entry)} names a {self.kind} called {own!r}: the "
                                 "entry point's name must be the same")
        return obj

    def all(self) -> dict[str, T]:
        """Every registered object by name (imports each entry point)."""
        found = self._entries()                      # one scan of the installed metadata
        return {name: self._get(name, found) for name in sorted(set(found) | set(self.registered))}

    def _checked(self, obj: object, origin: str) -> str:
        try:
            return self.check(obj)
        except (TypeError, AttributeError) as exc:
            raise DecobenchError(f"{origin} is not a {self.kind}: {exc}") from exc
