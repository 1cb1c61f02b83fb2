"""The flags of one training run, shared by ``decobench run`` and one emulated rank
(``python -m decobench.emulated``), and how they become a run config's values.

:func:`add_run_flags` adds the run's own flags: one per field of
:class:`decobench.runs.config.RunConfig` (and a flat one per emulation setting,
``FLAT_EMULATION_FIELDS``), named, typed and described by the field, so each description
lives once, in the config; and the few flags of the command itself (``--config``,
``--resume``, ...). :func:`add_method_flags` adds one flag per field of every registered
method's options model; :func:`run_values` merges ``--config FILE`` with the flags into the
mapping :func:`decobench.runs.config.build_run_config` validates.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

NOT_FLAGS = {"suite": "set by decobench sweep (names the W&B project)",
             "emulation": "its fields have flat flags (FLAT_EMULATION_FIELDS)",
             "method_options": "one flag per option (add_method_flags)"}
"""RunConfig fields without a flag of their own, and why."""

COMMAND_FLAGS: dict[str, dict[str, Any]] = {
    "--config": {"default": argparse.SUPPRESS, "metavar": "FILE.yaml", "help":
                 "YAML file with any of these options (underscored or dashed keys; method "
                 "options at top level or under method_options:); flags override it"},
    "--overwrite": {"action": "store_true", "help": "replace an existing run directory"},
    "--resume": {"action": "store_true", "help": "continue the interrupted run in --out from "
                 "its checkpoint (same flags as the interrupted run); simulated: the result "
                 "equals an uninterrupted run's; emulated: every rank restores the newest "
                 "iteration all ranks hold"},
    "--no-progress": {"action": "store_true", "help": "no progress bar"},
    "--no-wandb": {"action": "store_true", "help": "do not log to Weights & Biases (default: "
                   "log offline into the run directory; WANDB_MODE=online to upload, "
                   "WANDB_MODE=disabled also turns it off; see docs/wandb.md)"},
}
"""The flags of the command itself, not of the run config (add_argument keywords)."""

_ORDER = ("--config", "task", "method", "workers", "trace", "regime", "transmission_ratio",
          "latency_ratio", "ratio_shape", "trace_loop", "target", "stop_at_target",
          "max_sim_time", "max_iters", "seed", "data_root", "dataset", "out", "--overwrite",
          "--resume", "checkpoint_every_s", "backend", "latency_mechanism",
          "emulation_timeout_s", "skip_probe", "packet_loss", "collectives_in_flight",
          "profile", "init", "topology", "compute_time", "compute_time_s", "gradient_engine",
          "device", "matmul_precision", "autocast", "eval_every", "fine_eval_every", "fine_eval_margin",
          "ttt_resolution", "milestones", "batch_size", "lr", "momentum", "weight_decay",
          "schedule", "warmup_iters", "topk_scope", "ef_units", "clip_norm", "step_bound",
          "momentum_correction", "divergence_loss", "divergence_window", "log_every",
          "replay_schedule", "transport_model", "calibrate_transport", "label", "condition",
          "--no-progress", "--no-wandb")
"""The order of ``--help`` (a run-config key not named here comes last)."""

_FLAG_NAMES = {"milestones": "--milestone"}
"""Flags not named after their key (a boolean that defaults to true is ``--no-KEY``)."""

_METAVARS = {
    "trace": "CSV|NAME", "regime": "PROFILE:TRACE|ALIAS", "transmission_ratio": "RHO",
    "latency_ratio": "LAMBDA", "ratio_shape": "TRACE", "max_sim_time": "SECONDS",
    "data_root": "DIR", "dataset": "VARIANT", "out": "DIR", "checkpoint_every_s": "SECONDS",
    "backend": "NAME", "emulation_timeout_s": "SECONDS", "packet_loss": "FRACTION",
    "collectives_in_flight": "N", "compute_time_s": "SECONDS", "device": "auto|cpu|cuda[:N]",
    "eval_every": "E", "fine_eval_every": "E_F", "fine_eval_margin": "M", "ttt_resolution": "R",
    "milestones": "TARGET", "replay_schedule": "METRICS.jsonl|RUN_DIR",
    "transport_model": "ideal|FILE|RUN_DIR", "clip_norm": "C", "divergence_loss": "L",
    "divergence_window": "W"}
"""Metavars other than argparse's (the key in capitals)."""


def run_flag_fields() -> dict[str, FieldInfo]:
    """Every run-config key a flag sets, with its field: RunConfig's fields less
    :data:`NOT_FLAGS`, and the flat keys of the emulation settings."""
    from decobench.runs.config import FLAT_EMULATION_FIELDS, EmulationConfig, RunConfig

    fields = {k: f for k, f in RunConfig.model_fields.items() if k not in NOT_FLAGS}
    fields.update({flat: EmulationConfig.model_fields[name]
                   for flat, name in FLAT_EMULATION_FIELDS.items()})
    return fields


def field_flag(key: str, field: FieldInfo) -> tuple[str, dict[str, Any]]:
    """The flag of run-config key ``key`` and its add_argument keywords: type or choices from
    the field's annotation (``X | None`` is X), help = the field's description."""
    kind = field.annotation
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        kind = inner[0] if len(inner) == 1 else kind
    flag = _FLAG_NAMES.get(key, "--" + key.replace("_", "-"))
    kwargs: dict[str, Any] = {"dest": key, "default": argparse.SUPPRESS,
                              "help": (field.description or "").replace("%", "%%")}
    if typing.get_origin(kind) is typing.Literal:
        kwargs["choices"] = list(typing.get_args(kind))
    elif kind is bool:
        kwargs["action"] = "store_false" if field.default is True else "store_true"
        if field.default is True:
            flag = "--no-" + flag.removeprefix("--")
    elif typing.get_origin(kind) is list:
        kwargs.update(action="append", type=typing.get_args(kind)[0])
    elif kind in (int, float):
        kwargs["type"] = kind
    elif kind is not str:
        raise TypeError(f"run config field {key!r}: no flag for a {kind!r}")
    if key in _METAVARS:
        kwargs["metavar"] = _METAVARS[key]
    return flag, kwargs


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    fields = run_flag_fields()
    group = parser.add_argument_group("run")
    for key in (*_ORDER, *(k for k in fields if k not in _ORDER)):
        if key in COMMAND_FLAGS:
            group.add_argument(key, **COMMAND_FLAGS[key])
        else:
            flag, kwargs = field_flag(key, fields[key])
            group.add_argument(flag, **kwargs)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_KINDS: dict[str, Any] = {"bool": _parse_bool, "int": int, "float": float, "str": str}


def add_method_flags(parser: argparse.ArgumentParser, only: str | None) -> None:
    """One flag per method option field. All are parsed (so an option the chosen method does
    not have is reported by that method's options model); with ``--method M`` the help shows
    only M's options, with M's defaults. Built from :func:`decobench.cli.metadata.
    run_metadata` (no task or method module is imported when its cache is current)."""
    from decobench.cli.metadata import run_metadata

    specs = run_metadata()["methods"]
    shown = {only} if only in specs else set(specs)
    owners: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for method, spec in specs.items():
        for name, info in spec["options"].items():
            owners.setdefault(name, []).append((method, info))
    title = f"options of {only}" if only in specs else "method options (each names its methods)"
    group = parser.add_argument_group(title)
    card = ""
    if only in specs:
        where = specs[only].get("card")
        card = (f"method card: {where}" if where else "a plugin method (not shipped with "
                "decobench): its card is in its own package's documentation")
        group.description = card
    if not any(method in shown for entries in owners.values() for method, _ in entries):
        group.description = f"this method has no options of its own; {card}"
    for name, entries in owners.items():
        visible = [(method, info) for method, info in entries if method in shown]
        info = (visible or entries)[0][1]
        kind, choices = _KINDS[info["kind"]], info["choices"]
        flag = "--" + name.replace("_", "-")
        extra: dict[str, Any] = {}
        if kind is _parse_bool:
            extra = {"nargs": "?", "const": True, "metavar": "true|false"}
        elif not choices:
            extra = {"metavar": name.upper()}
        defaults = {i["default"] for _, i in visible}
        if len(defaults) == 1:
            default = f"default {defaults.pop()}"
        else:
            default = "default " + ", ".join(f"{m}: {i['default']}" for m, i in visible)
        methods = "" if only in specs else "; " + ", ".join(m for m, _ in visible)
        group.add_argument(flag, dest=f"method_option__{name}", type=kind, choices=choices,
                           default=argparse.SUPPRESS,
                           help=f"{info['description']} [{default}{methods}]" if visible
                           else argparse.SUPPRESS, **extra)


def run_values(args: argparse.Namespace) -> dict[str, Any]:
    """The run config's values: ``--config`` file, then the flags given (which override it);
    method options from either place go under ``method_options``."""
    from decobench.cli.metadata import run_metadata
    from decobench.runs.config import load_yaml_config

    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values = load_yaml_config(args.config)
    options = dict(values.pop("method_options", None) or {})
    option_names = {f for spec in run_metadata()["methods"].values() for f in spec["options"]}
    for name in list(values):
        if name in option_names:
            options[name] = values.pop(name)
    skip = {"func", "command"} | {flag[2:].replace("-", "_") for flag in COMMAND_FLAGS}
    for key, value in vars(args).items():
        if key.startswith("method_option__"):
            options[key.removeprefix("method_option__")] = value
        elif key not in skip:
            values[key] = value
    values["method_options"] = options
    return values
