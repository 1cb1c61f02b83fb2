"""The flags of one training run, shared by ``decobench run`` and one emulated rank
(``python -m decobench.emulated``), and how they become a run config's values.

:func:`add_run_flags` adds the run's own flags; :func:`add_method_flags` one flag per field
of every registered method's options model; :func:`run_values` merges ``--config FILE`` with
the flags into the mapping :func:`decobench.runs.config.build_run_config` validates.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    S = argparse.SUPPRESS
    g = parser.add_argument_group("run")
    g.add_argument("--config", default=S, metavar="FILE.yaml",
                   help="YAML file with any of these options (underscored or dashed keys; "
                   "method options at top level or under method_options:); flags override it")
    g.add_argument("--task", default=S, help="task name (see 'decobench run --help' footer)")
    g.add_argument("--method", default=S, help="method name")
    g.add_argument("--workers", type=int, default=S, help="number of workers n (default 4)")
    g.add_argument("--trace", default=S, metavar="CSV|NAME",
                   help="network trace: a CSV file or a bundled trace name "
                   "(see 'decobench trace list')")
    g.add_argument("--regime", default=S, metavar="PROFILE:TRACE|ALIAS",
                   help="network relative to the task instead of --trace: TRACE as the task's "
                   "PROFILE sees it (e.g. paper:wan-200ms-lowbw-varying, alias paper-wan), "
                   "mapped onto this run's --profile with k = T/T_ref: times and latencies "
                   "× k, bandwidth × (d/d_ref)/k, which keeps S/(a·T) and b/T")
    g.add_argument("--transmission-ratio", type=float, default=S, metavar="RHO",
                   help="constant network with S/(a·T) = RHO (S = 32·d bits, T the profile's "
                   "compute time); with --latency-ratio, instead of --trace")
    g.add_argument("--latency-ratio", type=float, default=S, metavar="LAMBDA",
                   help="constant network with one-way latency b = LAMBDA·T")
    g.add_argument("--ratio-shape", default=S, metavar="TRACE",
                   help="with the ratios: vary the network like TRACE (name or CSV) around "
                   "those means, its times as the task's paper profile sees them (the "
                   "report's regime map uses the task's deco52-* trace)")
    g.add_argument("--trace-loop", action="store_true", default=S,
                   help="loop the trace instead of holding its last row")
    g.add_argument("--target", type=float, default=S,
                   help="target metric: accuracy in [0, 1] or perplexity; the run stops at the "
                   "first evaluation that meets it")
    g.add_argument("--no-stop-at-target", dest="stop_at_target", action="store_false",
                   default=S, help="keep training after the target is met (until a budget)")
    g.add_argument("--max-sim-time", type=float, default=S, metavar="SECONDS",
                   help="budget in simulated seconds")
    g.add_argument("--max-iters", type=int, default=S,
                   help="budget in iterations (default: the task profile's)")
    g.add_argument("--seed", type=int, default=S, help="random seed (default 0)")
    g.add_argument("--data-root", default=S, metavar="DIR",
                   help="existing copy of the data set (no download); default: download to "
                   "~/.cache/decobench/data (vit-imagenet: required, ImageNet has no "
                   "download; see docs/tasks/)")
    g.add_argument("--dataset", default=S, metavar="VARIANT",
                   help="data set variant, for tasks with several (gpt2-wikitext: "
                   "wikitext-2-raw-v1 (default) or wikitext-103-raw-v1)")
    g.add_argument("--out", default=S, metavar="DIR",
                   help="run directory (default runs/TASK__METHOD__TRACE__nN__sSEED)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    g.add_argument("--resume", action="store_true", help="continue the interrupted run in "
                   "--out from its checkpoint (same flags as the interrupted run); simulated: "
                   "the result equals an uninterrupted run's; emulated: every rank restores "
                   "the newest iteration all ranks hold")
    g.add_argument("--checkpoint-every-s", type=float, default=S, metavar="SECONDS",
                   help="wall-clock seconds between checkpoints of the whole training "
                   "state (default 300)")
    g.add_argument("--backend", default=S, metavar="NAME",
                   help="where the run trains (a registered backend): simulated = n workers "
                   "in one process on the simulated clock (default); emulated = n worker "
                   "processes (torch.distributed) in Linux network namespaces over links "
                   "shaped live from the trace, times measured (root; docs/emulation.md)")
    g.add_argument("--latency-mechanism",
                   choices=["auto", "netem", "nfqueue", "comm-layer", "kernel"],
                   default=S, help="emulated: who adds the trace's one-way latency: netem "
                   "(kernel qdisc), nfqueue (a user-space delayer holds every received packet, "
                   "data and ACKs: packet-level latency without netem; needs iptables), "
                   "comm-layer (each message delivered at transmission end + l·b(t); rate "
                   "still shaped by tc), auto (the first of netem, nfqueue, comm-layer that "
                   "works here; default), kernel (torchrun ranks on links that already have "
                   "their latency)")
    g.add_argument("--emulation-timeout-s", type=float, default=S, metavar="SECONDS",
                   help="emulated: seconds a collective may take before a peer counts as lost "
                   "(default 60 + twice a dense message's transfer at the lowest bandwidth)")
    g.add_argument("--skip-probe", action="store_true", default=S,
                   help="emulated: do not measure the shaped links before training")
    g.add_argument("--packet-loss", type=float, default=S, metavar="FRACTION",
                   help="emulated: drop this fraction of the packets each worker receives "
                   "(data and ACKs; an iptables rule added after the probe), e.g. 0.01 for "
                   "1%%; default 0")
    g.add_argument("--collectives-in-flight", type=int, default=S, metavar="N",
                   help="emulated: collectives each rank keeps in flight at once, one process "
                   "group each (default 8 where the network adds the latency, so a message's "
                   "round trip overlaps the next ones as in the time model; 1 with "
                   "comm-layer); give at least the largest staleness τ + 1")
    g.add_argument("--profile", default=S, help="task profile (default 'paper')")
    g.add_argument("--init", choices=["scratch", "pretrained"], default=S,
                   help="model initialisation: scratch (default) or pretrained: published "
                   "weights, downloaded on first use (paper profiles of vit-imagenet and "
                   "gpt2-wikitext only; see docs/tasks/)")
    g.add_argument("--topology", choices=["paper", "ring"], default=S,
                   help="time-model topology factors: paper (h = l = 1, default) or ring "
                   "(ring all-gather / all-reduce; the default with --backend emulated)")
    g.add_argument("--compute-time", choices=["profile", "measured"], default=S,
                   help="per-iteration compute time T: the profile's fixed value in seconds "
                   "(default) or measured wall time")
    g.add_argument("--compute-time-s", type=float, default=S, metavar="SECONDS",
                   help="fixed per-iteration compute time T in seconds, overriding the "
                   "profile's (e.g. the time your GPU takes for one batch)")
    g.add_argument("--gradient-engine", choices=["auto", "grouped", "vmap", "loop"], default=S,
                   help="per-worker gradients: auto (default: grouped, one forward/backward "
                   "over n·B, when it applies and matches vmap on a probe batch; config.yaml "
                   "says which and why), grouped, vmap or loop; they differ only in float "
                   "rounding")
    g.add_argument("--device", default=S, metavar="auto|cpu|cuda[:N]",
                   help="where the model and gradients live: auto (default: the first CUDA GPU "
                   "when torch sees one, else the CPU), cpu, cuda or cuda:N; config.yaml "
                   "records the device used")
    g.add_argument("--matmul-precision", choices=["auto", "highest", "high"], default=S,
                   help="float32 matrix products on a GPU: auto (default: high, TensorFloat-32, "
                   "about 2x faster on an H200) or highest (full float32); the CPU always uses highest")
    g.add_argument("--eval-every", type=int, default=S, metavar="E",
                   help="evaluate every E iterations (default: the profile's)")
    g.add_argument("--fine-eval-every", type=int, default=S, metavar="E_F",
                   help="near a target, evaluate every E_F iterations instead of E, so time to "
                   "target is bracketed finely (summary.json: ttt_resolution_s); default off")
    g.add_argument("--fine-eval-margin", type=float, default=S, metavar="M",
                   help="relative distance to a target where --fine-eval-every takes over: "
                   "accuracy >= target·(1 − M), perplexity <= target·(1 + M) (default 0.05)")
    g.add_argument("--ttt-resolution", type=float, default=S, metavar="R",
                   help="near a target, evaluate every max(1, floor(R·k)) iterations around "
                   "iteration k (at most E_F), so a target met early is bracketed to a share R "
                   "of its iterations too, e.g. 0.02 (default off: every E_F)")
    g.add_argument("--milestone", dest="milestones", type=float, action="append", default=S,
                   metavar="TARGET", help="another target whose first time is recorded "
                   "(summary.json: milestones) without stopping the run; repeatable, e.g. "
                   "--target 0.8 --milestone 0.7")
    g.add_argument("--batch-size", type=int, default=S, help="per-worker batch size")
    g.add_argument("--lr", type=float, default=S, help="step size γ")
    g.add_argument("--momentum", type=float, default=S, help="momentum μ after aggregation")
    g.add_argument("--weight-decay", type=float, default=S, help="weight decay after aggregation")
    g.add_argument("--schedule", choices=["constant", "warmup", "warmup-cosine"], default=S,
                   help="learning-rate schedule: constant, linear warm-up then constant, or "
                   "warm-up then cosine decay to 0 at --max-iters (default: the profile's)")
    g.add_argument("--warmup-iters", type=int, default=S,
                   help="iterations of linear learning-rate warm-up")
    g.add_argument("--log-every", type=int, default=S, help="metrics row every k iterations "
                   "(default 1)")
    g.add_argument("--replay-schedule", default=S, metavar="METRICS.jsonl|RUN_DIR",
                   help="follow the per-iteration (δ, τ) of an earlier run (logged every "
                   "iteration) instead of deciding them, e.g. an emulated run replaying the "
                   "simulated run's plan; methods with a (δ, τ) controller only")
    g.add_argument("--transport-model", default=S, metavar="ideal|FILE|RUN_DIR",
                   help="simulated: the collectives' cost beyond the time model's ideal link: "
                   "ideal (default) or the transport_model.json an emulated run fitted with "
                   "--calibrate-transport (latency multiplier, goodput, burst per collective "
                   "kind; docs/emulation.md)")
    g.add_argument("--calibrate-transport", action="store_true", default=S,
                   help="emulated: before training, time collectives of several sizes on the "
                   "shaped links and write the fitted transport model to "
                   "RUN_DIR/transport_model.json (for --transport-model)")
    g.add_argument("--label", default=S, help="name of this method variant in reports and "
                   "W&B (default: the method name), e.g. deco-sgd-F25")
    g.add_argument("--condition", default=S, help="name of the network condition in reports "
                   "and W&B (default: the trace's file stem, the regime or the ratios)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-wandb", action="store_true",
                   help="do not log to Weights & Biases (default: log offline into the run "
                   "directory; WANDB_MODE=online to upload, WANDB_MODE=disabled also turns it "
                   "off; see docs/wandb.md)")


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
    from decobench.cli.metadata import run_metadata
    from decobench.runs.config import load_yaml_config

    """The run config's values: ``--config`` file, then the flags given (which override it);
    method options from either place go under ``method_options``."""
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values = load_yaml_config(args.config)
    options = dict(values.pop("method_options", None) or {})
    option_names = {f for spec in run_metadata()["methods"].values() for f in spec["options"]}
    for name in list(values):
        if name in option_names:
            options[name] = values.pop(name)
    skip = {"func", "command", "config", "overwrite", "resume", "no_progress", "no_wandb"}
    for key, value in vars(args).items():
        if key.startswith("method_option__"):
            options[key.removeprefix("method_option__")] = value
        elif key not in skip:
            values[key] = value
    values["method_options"] = options
    return values
