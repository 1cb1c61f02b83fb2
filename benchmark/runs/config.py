"""The resolved configuration of one run, validated before anything starts.

Values come from defaults, an optional YAML file (``--config``) and command-line flags
(flags override the file). Method-specific options are validated against the chosen
method's own options model, so ``--delta 1.5`` or an option the method does not have is
reported before training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from decobench.errors import DecobenchError


class EmulationConfig(BaseModel):
    """Settings of the emulated backend (``RunConfig.emulation``; the flags keep their flat
    names: ``--latency-mechanism``, ``--emulation-timeout-s``, ``--skip-probe``,
    ``--packet-loss``, ``--collectives-in-flight``, ``--calibrate-transport``). Each field's
    description is its flag's help."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    latency_mechanism: Literal["auto", "netem", "nfqueue", "comm-layer", "kernel"] = Field(
        "auto", description="emulated: who adds the trace's one-way latency: netem (kernel "
        "qdisc), nfqueue (a user-space delayer holds every received packet, data and ACKs: "
        "packet-level latency on kernels without netem; needs iptables), comm-layer (the "
        "communication layer delivers each message at transmission end + l·b(t); rate still "
        "shaped by tc), auto (the first of netem, nfqueue, comm-layer this machine can do; "
        "default), kernel (the network in place already has its latency: torchrun ranks on "
        "real or shaped links)")
    timeout_s: float | None = Field(
        None, gt=0, description="emulated: seconds a collective may take before a peer counts "
        "as lost (default: 60 s plus twice a dense message's transfer time at the trace's "
        "lowest bandwidth)")
    skip_probe: bool = Field(False, description="emulated: do not measure the shaped links "
                             "before training (without it, a link whose goodput or round "
                             "trip is more than 10% off the trace's first row stops the run)")
    packet_loss: float = Field(0.0, ge=0, lt=0.5, description="emulated: drop this fraction of "
                               "the packets each worker receives (data and ACKs alike; an "
                               "iptables statistic rule added after the probe), e.g. 0.01 for "
                               "1%; default 0; the simulated clock has no loss model")
    collectives_in_flight: int | None = Field(
        None, ge=1, le=64, description="emulated: collectives each rank keeps in flight at "
        "once, one process group each (docs/emulation.md \"Collectives in flight\"); default "
        "8 where the network adds the latency (a collective then lasts a round trip, and "
        "τ + 1 in flight overlap the latency as the time model does), 1 where the "
        "communication layer adds it (comm-layer); give at least the largest staleness τ + 1")
    calibrate_transport: bool = Field(
        False, description="emulated: before training, time collectives of several sizes on "
        "the shaped links and write the fitted transport model to RUN_DIR/transport_model.json "
        "(decobench.emulated.calibrate; for a simulated run's --transport-model)")


FLAT_EMULATION_FIELDS = {"latency_mechanism": "latency_mechanism",
                         "emulation_timeout_s": "timeout_s", "skip_probe": "skip_probe",
                         "packet_loss": "packet_loss",
                         "collectives_in_flight": "collectives_in_flight",
                         "calibrate_transport": "calibrate_transport"}
"""Run-config keys (and flags) that set :class:`EmulationConfig` fields: flat key -> field."""


class RunConfig(BaseModel):
    """One training run (``decobench run``). Units are in the field names or descriptions;
    each field's description is its ``decobench run`` flag's help (:mod:`decobench.cli.flags`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    task: str = Field(description="task name, e.g. cnn-fmnist (the list: 'decobench run "
                      "--help' footer)")
    method: str = Field(description="method name, e.g. deco-sgd (the list: 'decobench run "
                        "--help' footer)")
    workers: int = Field(4, ge=1, le=1024, description="number of workers n (default 4)")
    trace: str | None = Field(None, description="network trace: a CSV file or a bundled trace "
                              "name (see 'decobench trace list'), the network as this run's "
                              "own profile sees it")
    regime: str | None = Field(None, description="network relative to the task instead of "
                               "--trace: PROFILE:TRACE, TRACE as the task's PROFILE sees it "
                               "(e.g. paper:wan-200ms-lowbw-varying), or an alias such as "
                               "paper-wan; mapped onto this run's --profile with k = T/T_ref: "
                               "times and latencies × k, bandwidth × (d/d_ref)/k, which keeps "
                               "S/(a·T) and b/T")
    transmission_ratio: float | None = Field(None, gt=0, description="constant network with "
                                             "S/(a·T) = RHO (S = 32·d bits, T the profile's "
                                             "compute time); with --latency-ratio, instead of "
                                             "--trace")
    latency_ratio: float | None = Field(None, ge=0, description="constant network with one-way "
                                        "latency b = LAMBDA·T; with --transmission-ratio")
    ratio_shape: str | None = Field(None, description="with the ratios: vary the network like "
                                    "TRACE (a CSV file or bundled trace name) around those "
                                    "means: its bandwidth and latency relative to their means, "
                                    "its times as the task's paper profile sees them (the "
                                    "report's regime map uses the task's deco52-* trace)")
    trace_loop: bool = Field(False, description="loop the trace instead of holding its last row")
    target: float | None = Field(None, description="target metric: accuracy in [0, 1] "
                                 "(classification) or perplexity (language modelling); the run "
                                 "stops at the first evaluation that meets it")
    stop_at_target: bool = Field(True, description="end the run at the first evaluation that "
                                 "meets the target (default); --no-stop-at-target keeps "
                                 "training after it is met (until a budget)")
    max_sim_time: float | None = Field(None, gt=0, description="budget in simulated seconds")
    checkpoint_every_s: float | None = Field(
        300.0, gt=0, description="wall-clock seconds between checkpoints of the whole "
        "training state (RUN_DIR/checkpoint.pt; emulated: RUN_DIR/checkpoints/, one file per "
        "rank), for --resume (default 300; null in a --config file: never)")
    max_iters: int | None = Field(None, gt=0, description="budget in iterations (default: "
                                  "the task profile's)")
    seed: int = Field(0, ge=0, description="random seed (default 0)")
    data_root: str | None = Field(None, description="folder with an existing copy of the data "
                                  "set (no download); default: download to "
                                  "~/.cache/decobench/data (vit-imagenet: required, ImageNet "
                                  "has no download; see docs/tasks/)")
    out: str | None = Field(None, description="run directory (default "
                            "runs/TASK__LABEL__CONDITION__PROFILE__nN__sSEED)")
    dataset: str | None = Field(None, description="data set variant, for tasks with several "
                                "(gpt2-wikitext: wikitext-2-raw-v1 or wikitext-103-raw-v1); "
                                "default: the task's first")
    backend: str = Field(
        "simulated", description="where the run trains, a registered backend "
        "(decobench.runs.backends): simulated = n workers in one process on the simulated "
        "clock (default); emulated = n worker processes (torch.distributed) in Linux network "
        "namespaces over links shaped live from the trace, times measured (root; "
        "docs/emulation.md)")
    emulation: EmulationConfig = Field(default_factory=EmulationConfig,
                                       description="settings of the emulated backend")
    profile: str = Field("paper", description="task profile: model size, batch, lr, T "
                         "(default 'paper')")
    init: Literal["scratch", "pretrained"] = Field(
        "scratch", description="model initialisation: scratch (random weights from --seed, "
        "the default) or pretrained (published weights, downloaded from the Hugging Face Hub "
        "on first use; paper profiles only: vit-imagenet loads timm "
        "vit_base_patch16_224.augreg_in21k (ImageNet-21k) with a new head, gpt2-wikitext "
        "loads GPT-2 small (transformers 'gpt2') and needs GPT-2's tokenizer; the cpu "
        "profiles and the CNN tasks have none; see docs/tasks/)")
    topology: Literal["paper", "ring"] = Field("paper", description="communication topology "
                                               "factors of the time model: paper (h = l = 1, "
                                               "default) or ring (ring all-gather / "
                                               "all-reduce; the default with --backend "
                                               "emulated, whose collectives are rings)")
    compute_time: Literal["profile", "measured"] = Field(
        "profile", description="per-iteration compute time T: profile, the profile's fixed "
        "value in seconds (default), or measured, the wall time of the vectorised gradient "
        "step divided by n")
    compute_time_s: float | None = Field(None, gt=0, le=1e6, description="fixed per-iteration "
                                         "compute time T in seconds, overriding the "
                                         "profile's (e.g. the time your GPU takes for one "
                                         "batch; at most 1e6, 11.6 days, so simulated times "
                                         "stay finite)")
    gradient_engine: Literal["auto", "grouped", "vmap", "loop"] = Field(
        "auto", description="how the n workers' gradients are computed (decobench.training.gradients): "
        "auto (default: grouped when every parameter has a rule and it matches vmap on a "
        "probe batch, else vmap; config.yaml says which and why), grouped (one "
        "forward/backward over n·B), vmap, or loop (one pass per worker); they differ only "
        "in float rounding")
    device: str = Field(
        "auto", pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$",
        description="where the model and its gradients live: auto (default: the first CUDA "
        "GPU when torch sees one, else the CPU), cpu, cuda or cuda:N (simulated backend; "
        "the emulated backend gives each rank its local GPU under auto and cuda). Results "
        "on a GPU differ from the CPU's in float rounding, and CUDA's backward kernels are "
        "not bit-deterministic; config.yaml records the device used")
    matmul_precision: Literal["auto", "highest", "high"] = Field(
        "auto", description="float32 matrix products on a GPU (torch."
        "set_float32_matmul_precision): auto (default) = high on a GPU, i.e. TensorFloat-32 "
        "tensor cores, 1.9x (ViT-B/16) to 2.3x (GPT-2) faster per iteration on an H200 than "
        "highest, full float32; the CPU always uses torch's default, highest")
    autocast: Literal["off", "bf16"] = Field(
        "off", description="mixed precision for the forward and backward passes (torch."
        "autocast): off (default: float32 throughout), or bf16: matrix products and "
        "attention in bfloat16 as nanoGPT trains GPT-2, while the parameters, the workers' "
        "gradients, compression, error feedback and the update stay float32 "
        "(docs/gradients.md \"Mixed precision\"); meant for GPUs' tensor cores: on most "
        "CPUs bfloat16 products are slower than float32 ones")
    eval_every: int | None = Field(None, gt=0, description="evaluate every E iterations "
                                   "(default: the task profile's)")
    fine_eval_every: int | None = Field(
        None, gt=0, description="near a target, evaluate every E_F iterations instead of E: "
        "from the first evaluation within --fine-eval-margin of a target not met yet until it "
        "is met, so the time to target is bracketed finely (summary.json: "
        "ttt_resolution_s); default: off (every E)")
    fine_eval_margin: float = Field(
        0.05, gt=0, lt=1, description="relative distance to a target at which --fine-eval-every "
        "takes over: accuracy >= target·(1 − M), perplexity <= target·(1 + M) (default 0.05)")
    ttt_resolution: float | None = Field(
        None, gt=0, lt=1, description="near a target, evaluate every max(1, ⌊R·k⌋) "
        "iterations around iteration k (at most E_F, --fine-eval-every), so a target met "
        "early is bracketed to a share R of its iterations too (e.g. 0.02: 2%; of its time "
        "while iterations take equally long); default: off (every E_F)")
    milestones: list[float] = Field(
        default_factory=list, description="more targets whose first time and iteration are "
        "recorded in summary.json (milestones) without stopping the run; the flag is "
        "repeatable, one target each, e.g. --target 0.8 --milestone 0.7")
    batch_size: int | None = Field(None, gt=0, description="per-worker batch size (default: "
                                   "the task profile's)")
    lr: float | None = Field(None, gt=0, description="step size γ (default: the profile's)")
    momentum: float | None = Field(None, ge=0, lt=1, description="momentum μ after aggregation "
                                   "(default: the profile's)")
    weight_decay: float | None = Field(None, ge=0, description="weight decay after aggregation "
                                       "(default: the profile's)")
    schedule: Literal["constant", "warmup", "warmup-cosine"] | None = Field(
        None, description="learning-rate schedule: constant, linear warm-up then constant, or "
        "warm-up then cosine decay to 0 at --max-iters (default: the profile's)")
    warmup_iters: int | None = Field(None, ge=0, description="iterations of linear "
                                     "learning-rate warm-up (default: the profile's)")
    topk_scope: Literal["global", "layer"] | None = Field(
        None, description="update rule (docs/design.md §2.5): Top-k over the whole flat model "
        "(global, the paper's) or per tensor, each keeping the share δ of its own coordinates "
        "(layer); default: the profile's")
    ef_units: Literal["gradient", "update"] | None = Field(
        None, description="update rule (§2.5): error feedback on raw gradients (gradient, the "
        "paper's) or on γ_t·g, the aggregate applied without a second γ, so a residual keeps "
        "the step it was computed with under a warm-up (update); default: the profile's")
    clip_norm: float | None = Field(
        None, ge=0, description="update rule (§2.5): scale each worker's gradient to at most "
        "this L2 norm before compression, every method alike; 0 = off (the paper's); default: "
        "the profile's")
    step_bound: Literal["none", "theorem-1"] | None = Field(
        None, description="update rule (§2.5): one γ for every method (none, the paper's) or "
        "γ·s(δ_t, τ_t), s = 1/sqrt(1 + Φ_paper(δ_t, τ_t)), this project's fill-in of the step "
        "condition the paper's Theorem 1 has lost (theorem-1); D-SGD keeps γ; default: the "
        "profile's")
    momentum_correction: Literal["on", "off"] | None = Field(
        None, description="update rule (§2.5): momentum μ (--momentum) on the workers before "
        "compression with DGC's correction and factor masking (on) instead of after "
        "aggregation (off, the paper's); default: the profile's")
    divergence_loss: float | None = Field(
        None, gt=0, description="also count the run as diverged, and stop it, once its training "
        "loss exceeds L (the task's loss units: nats per token for GPT-2, whose untrained loss is "
        "ln(vocabulary), 9.7 at the mid profile), e.g. a γ ramp past its stable step; default: "
        "only a loss that is not finite (docs/design.md §6.4)")
    divergence_window: int = Field(
        1, ge=1, le=100, description="--divergence-loss judges the median of the last W "
        "training losses, once W exist, so a one-off spike does not stop the run (default 1: "
        "each loss alone)")
    log_every: int = Field(1, ge=1, description="write a metrics row every k iterations "
                           "(default 1)")
    replay_schedule: str | None = Field(
        None, description="metrics.jsonl of an earlier run (or its run directory), logged "
        "every iteration, whose per-iteration (δ, τ) this run's method follows instead of "
        "deciding them: the same decisions on another backend or network, e.g. an emulated "
        "run replaying the simulated run's plan; methods with a (δ, τ) controller only")
    transport_model: str | None = Field(
        None, description="simulated: how the collectives depart from the time model's ideal "
        "link: 'ideal' (docs/design.md §4.7, the default) or the transport_model.json an "
        "emulated run fitted with --calibrate-transport (or its run directory): "
        "per-collective-kind costs (latency multiplier, goodput, burst) and how messages in "
        "flight share the link (fifo as the time model, or shared on lanes); "
        "docs/emulation.md \"Transport models\"")
    label: str | None = Field(None, min_length=1, description="display name of this method "
                              "variant in reports and W&B (default: the method name), e.g. "
                              "deco-sgd-F25")
    condition: str | None = Field(None, min_length=1, description="name of the network "
                                  "condition in reports and W&B (default: the trace's file "
                                  "stem, the regime or the ratios)")
    suite: str | None = Field(None, min_length=1, description="suite this run belongs to "
                              "(set by decobench sweep; names the W&B project)")
    method_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _nest_emulation(cls, values: Any) -> Any:
        """Flat keys (flags, older YAML files) set the nested emulation settings."""
        if not isinstance(values, dict) or not FLAT_EMULATION_FIELDS.keys() & values.keys():
            return values
        values = dict(values)
        nested = values.get("emulation")
        nested = dict(nested.model_dump() if isinstance(nested, BaseModel) else nested or {})
        for flat, name in FLAT_EMULATION_FIELDS.items():
            if flat in values:
                nested[name] = values.pop(flat)
        values["emulation"] = nested
        return values

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.backend == "emulated" and "topology" not in self.model_fields_set:
            # the emulated wire is a ring (gloo/NCCL ring all-gather and all-reduce), so its
            # time-model factors are the ring's unless the user asks otherwise
            object.__setattr__(self, "topology", "ring")
        if self.target is not None and self.target <= 0:
            raise ValueError("target must be positive")
        if (self.transmission_ratio is None) != (self.latency_ratio is None):
            raise ValueError("give --transmission-ratio and --latency-ratio together")
        if self.ratio_shape is not None and self.transmission_ratio is None:
            raise ValueError("--ratio-shape shapes the network given by --transmission-ratio "
                             "and --latency-ratio; give those too")
        given = [name for name, value in (("--trace", self.trace), ("--regime", self.regime),
                                          ("--transmission-ratio", self.transmission_ratio))
                 if value is not None]
        if len(given) != 1:
            raise ValueError("give the network as exactly one of --trace, --regime or "
                             "--transmission-ratio with --latency-ratio"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


def format_validation_error(error: ValidationError, prefix: str = "") -> str:
    """One line naming each bad field as its flag, e.g. ``--delta: Input should be ...``."""
    parts = []
    for item in error.errors():
        loc = [str(x) for x in item["loc"] if x != "method_options"]
        if loc[:1] == ["emulation"] and len(loc) > 1:
            flat = {v: k for k, v in FLAT_EMULATION_FIELDS.items()}
            loc = [flat.get(loc[1], loc[1]), *loc[2:]]
        name = "--" + "-".join(loc).replace("_", "-") if loc else "config"
        value = item.get("input")
        shown = f" (got {value!r})" if not isinstance(value, dict) and value is not None else ""
        parts.append(f"{name}: {item['msg']}{shown}")
    return prefix + "; ".join(parts)


def load_yaml_config(path: str | Path) -> dict[str, Any]:
    """Read a run config YAML file into a dict (keys use underscores, like the fields)."""
    path = Path(path)
    if not path.exists():
        raise DecobenchError(f"--config {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DecobenchError(f"--config {path}: not valid YAML ({exc})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DecobenchError(f"--config {path}: cannot be read ({reason}); give a YAML "
                             "file") from exc
    if not isinstance(data, dict):
        raise DecobenchError(f"--config {path}: expected a mapping of option: value")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def build_run_config(values: dict[str, Any]) -> RunConfig:
    """Validate ``values`` into a :class:`RunConfig`, or raise a one-line DecobenchError."""
    try:
        return RunConfig(**values)
    except ValidationError as exc:
        raise DecobenchError(format_validation_error(exc, "invalid run configuration: ")) from exc
