"""Read back what an offline W&B run wrote, for tests.

wandb 0.31 no longer ships a Python reader for its transaction log (``run-<id>.wandb``), so
this is a small one. The file format, checked against files that wandb 0.31 writes:

* a 7-byte header: ``b":W&B"``, the magic ``0xBEE1`` as 2 little-endian bytes, version ``0``;
* then LevelDB-log-format physical records in 32 KiB blocks. Block boundaries are counted
  from the start of the *file*, so the first block holds the header and 32 761 bytes of
  records. Each physical record is a 7-byte header (CRC-32 as 4 little-endian bytes, the
  data length as 2 little-endian bytes, the type: FULL=1, FIRST=2, MIDDLE=3, LAST=4) and
  its data. The CRC is plain (IEEE, zlib) CRC-32 of the type byte followed by the data,
  unmasked (wandb's choice, not LevelDB's masked CRC-32C). A block's tail shorter than a
  record header is zero padding;
* each logical record (a FULL record, or FIRST + MIDDLE... + LAST joined) is a serialized
  ``wandb.proto.wandb_internal_pb2.Record``.

:func:`read_run` parses one file (or the single offline run under a folder) into a
:class:`WandbRecords` with helpers for the config, history rows, summary, defined metrics,
exit code and the run's project / group / job type / name / tags.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = b":W&B" + struct.pack("<H", 0xBEE1) + bytes([0])
"""The 7-byte file header of a ``.wandb`` transaction log (version 0)."""
BLOCK_SIZE = 32 * 1024
RECORD_HEADER_SIZE = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class WandbFileError(ValueError):
    """The file is not a well-formed ``.wandb`` transaction log."""


def read_chunks(data: bytes) -> list[bytes]:
    """The logical records (serialized protobuf messages) of a ``.wandb`` file's bytes."""
    if data[: len(HEADER)] != HEADER:
        raise WandbFileError(f"not a .wandb file (header {data[:len(HEADER)]!r})")
    records: list[bytes] = []
    pending: list[bytes] | None = None
    pos = len(HEADER)
    while pos < len(data):
        left = BLOCK_SIZE - pos % BLOCK_SIZE
        if left < RECORD_HEADER_SIZE:  # block trailer: zero padding
            pos += left
            continue
        if pos + RECORD_HEADER_SIZE > len(data):
            raise WandbFileError(f"truncated record header at byte {pos}")
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if crc == 0 and length == 0 and kind == 0:  # zero-filled rest of a block
            pos += left
            continue
        start = pos + RECORD_HEADER_SIZE
        payload = data[start:start + length]
        if len(payload) != length:
            raise WandbFileError(f"truncated record at byte {pos}")
        if zlib.crc32(bytes([kind]) + payload) != crc:
            raise WandbFileError(f"bad checksum of the record at byte {pos}")
        pos = start + length
        if kind == FULL:
            records.append(payload)
        elif kind == FIRST:
            pending = [payload]
        elif kind in (MIDDLE, LAST):
            if pending is None:
                raise WandbFileError(f"continuation record without a first at byte {pos}")
            pending.append(payload)
            if kind == LAST:
                records.append(b"".join(pending))
                pending = None
        else:
            raise WandbFileError(f"unknown record type {kind} at byte {pos}")
    return records


def _json(value: str) -> Any:
    """Decode a wandb ``value_json`` (which may be NaN / Infinity / -Infinity)."""
    return json.loads(value) if value else None


def _set(out: dict[str, Any], key: str, nested: Any, value: Any) -> None:
    """Store an item; a ``nested_key`` (wandb's flattening of a dict value, e.g. a logged
    ``wandb.Table`` → ``["tables/x", "_type"]``) becomes nested dicts again."""
    if key:
        out[key] = value
        return
    *parents, last = list(nested)
    for part in parents:
        child = out.get(part)
        if not isinstance(child, dict):
            child = out[part] = {}
        out = child
    out[last] = value


def _remove(out: dict[str, Any], key: str, nested: Any) -> None:
    if key:
        out.pop(key, None)
        return
    *parents, last = list(nested)
    for part in parents:
        out = out.get(part)
        if not isinstance(out, dict):
            return
    out.pop(last, None)


@dataclass
class WandbRecords:
    """The records of one run's ``.wandb`` file, grouped by kind (``run``, ``config``,
    ``history``, ``summary``, ``metric``, ``exit``, ``artifact``, ``telemetry``, ...)."""

    path: Path
    by_kind: dict[str, list[Any]] = field(default_factory=dict)

    def kind(self, name: str) -> list[Any]:
        """All protobuf messages of one kind (the ``Record.record_type`` field name)."""
        return self.by_kind.get(name, [])

    @property
    def run(self) -> Any:
        """The (last) ``RunRecord``: project, run_group, job_type, display_name, tags..."""
        runs = self.kind("run")
        if not runs:
            raise WandbFileError(f"{self.path}: no run record")
        return runs[-1]

    @property
    def project(self) -> str:
        return self.run.project

    @property
    def group(self) -> str:
        return self.run.run_group

    @property
    def job_type(self) -> str:
        return self.run.job_type

    @property
    def name(self) -> str:
        return self.run.display_name

    @property
    def tags(self) -> list[str]:
        return list(self.run.tags)

    def config(self) -> dict[str, Any]:
        """The run's config: the run record's, then every config update, without wandb's own
        ``_wandb`` entry."""
        out: dict[str, Any] = {}
        sources = [r.config for r in self.kind("run")] + self.kind("config")
        for record in sources:
            for item in record.update:
                _set(out, item.key, item.nested_key, _json(item.value_json))
            for item in record.remove:
                _remove(out, item.key, item.nested_key)
        out.pop("_wandb", None)
        return out

    def history(self) -> list[dict[str, Any]]:
        """Every logged row (one per ``run.log`` call), values decoded, including wandb's
        ``_step`` / ``_runtime`` / ``_timestamp``."""
        rows = []
        for record in self.kind("history"):
            row: dict[str, Any] = {}
            for item in record.item:
                _set(row, item.key, item.nested_key, _json(item.value_json))
            rows.append(row)
        return rows

    def summary(self) -> dict[str, Any]:
        """The final summary: every summary update applied in order."""
        out: dict[str, Any] = {}
        for record in self.kind("summary"):
            for item in record.update:
                _set(out, item.key, item.nested_key, _json(item.value_json))
            for item in record.remove:
                _remove(out, item.key, item.nested_key)
        return out

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Defined metrics by name or glob: ``{"train/*": {"step_metric": "sim_time_s",
        ...}}``."""
        out: dict[str, dict[str, Any]] = {}
        for record in self.kind("metric"):
            name = record.name or record.glob_name
            out[name] = {"glob": bool(record.glob_name), "step_metric": record.step_metric,
                         "hidden": record.options.hidden, "step_sync": record.options.step_sync}
        return out

    @property
    def exit_code(self) -> int | None:
        """The exit code given to ``run.finish`` (None when the run never finished)."""
        exits = self.kind("exit")
        return exits[-1].exit_code if exits else None

    @property
    def files_dir(self) -> Path:
        """The run's ``files`` folder (media, config, requirements)."""
        return self.path.parent / "files"

    def media_json(self, value: dict[str, Any]) -> Any:
        """The JSON file a logged media value points to (``{"_type": "table-file", "path":
        "media/table/..."}``), e.g. a table's ``{"columns": [...], "data": [[...]]}``."""
        return json.loads((self.files_dir / value["path"]).read_text())

    def artifacts(self) -> list[Any]:
        """``ArtifactRecord`` messages (type, name, manifest...)."""
        return self.kind("artifact")


def find_run_file(path: Path) -> Path:
    """The single ``run-*.wandb`` file at or under ``path``."""
    path = Path(path)
    if path.is_file():
        return path
    files = sorted(path.rglob("run-*.wandb"))
    if len(files) != 1:
        raise WandbFileError(f"expected one run-*.wandb under {path}, found {len(files)}")
    return files[0]


def read_run(path: Path) -> WandbRecords:
    """Parse a ``.wandb`` file (or the only one under the folder ``path``)."""
    from wandb.proto import wandb_internal_pb2

    file = find_run_file(path)
    grouped: dict[str, list[Any]] = defaultdict(list)
    for chunk in read_chunks(file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        kind = record.WhichOneof("record_type")
        if kind is not None:
            grouped[kind].append(getattr(record, kind))
    return WandbRecords(path=file, by_kind=dict(grouped))


def is_nonfinite(value: Any) -> bool:
    """True for NaN / ±inf as decoded from ``value_json``."""
    return isinstance(value, float) and not math.isfinite(value)
