# decobench: two commands do everything on a fresh machine: `make reproduce` and `make test`.
# Each creates or refreshes the virtual environment in .venv from pyproject.toml first.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Suite of `make reproduce` (smoke, cpu-paper, regime-maps, gpu-day, paper,
# scaling, theory or planner-study; or a suite YAML file) and where its runs and report go.
SUITE   ?= smoke
RESULTS ?= results/$(notdir $(basename $(SUITE)))
JOBS    ?=
# Data: the offline slices in ../shared/data when they are beside the checkout; otherwise
# each task downloads its data set. ImageNet has no download: IMAGENET=/path/to/imagenet.
FMNIST_ROOT   ?= $(wildcard ../shared/data/fashion-mnist-mini)
WIKITEXT_ROOT ?= $(wildcard ../shared/data/wikitext-2)
# The CPU tiers (cpu-paper, regime-maps) run CIFAR-10 on the slice of the real CIFAR-10 in
# ../shared/data (rows say "slice"; without it the task downloads the full data set) and
# ImageNet on an offline STAND-IN built from CIFAR-10's images (labelled as such in every
# run; docs/tasks/vit-imagenet.md), unless you give the data sets with CIFAR10_ROOT= and
# IMAGENET=. Other suites download CIFAR-10 and need IMAGENET= for ImageNet.
STANDINS ?= data/standins
ifneq ($(filter cpu-paper regime-maps,$(notdir $(basename $(SUITE)))),)
CIFAR10_ROOT  ?= $(wildcard ../shared/data/cifar10-mini)
IMAGENET      ?= $(STANDINS)/imagenet
endif
CIFAR10_ROOT  ?=
IMAGENET      ?=
STANDIN_DEPS  := $(filter $(STANDINS)/%,$(IMAGENET))
DATA_FLAGS := $(if $(FMNIST_ROOT),--data-root cnn-fmnist=$(FMNIST_ROOT)) \
              $(if $(WIKITEXT_ROOT),--data-root gpt2-wikitext=$(WIKITEXT_ROOT)) \
              $(if $(CIFAR10_ROOT),--data-root cnn-cifar10=$(CIFAR10_ROOT)) \
              $(if $(IMAGENET),--data-root vit-imagenet=$(IMAGENET))

.PHONY: venv tools test test-slow bench reproduce gpu-check smoke-run smoke-check smoke-golden data-slices lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages some tests need, installed when missing in a root shell with apt-get (as
# in CI); elsewhere those tests are skipped with a message saying so: iptables gives the
# emulated links packet-level latency (NFQUEUE), loss and outages; docker-compose validates
# docker/compose.yaml, and with docker.io, containerd, runc and debootstrap runs the compose
# stack live on a private engine (tests/test_docker_live.py); slurmctld, slurmd, slurm-client, munge, slurmdbd and mariadb-server
# run a real single-node Slurm for `decobench sweep --executor slurm` (tests/test_executors.py,
# make test-slow).
TOOL_PACKAGES := iptables:iptables docker-compose:docker-compose dockerd:docker.io containerd:containerd \
                 runc:runc debootstrap:debootstrap slurmctld:slurmctld slurmd:slurmd \
                 sbatch:slurm-client munged:munge slurmdbd:slurmdbd mariadbd:mariadb-server
tools:
	@missing=""; for pair in $(TOOL_PACKAGES); do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || [ -x /usr/sbin/$${pair%%:*} ] \
	    || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages for tests:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $$missing >/dev/null) \
	    || echo "warning: could not install$$missing; the tests needing them will be skipped"; \
	  else echo "note:$$missing not installed; the tests needing them will be skipped"; fi; fi

test: $(STAMP) tools
	$(PY) -m pytest -q

test-slow: $(STAMP) tools
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) -m decobench.cli.bench --out bench-results/bench.json $(if $(FMNIST_ROOT),--fmnist-root $(FMNIST_ROOT))

# Run the suite (resumable: rerun after an interruption) and write its report
# ($(RESULTS)/report.md and report.html).
reproduce: $(STAMP) $(if $(STANDIN_DEPS),$(STANDINS)/README.txt)
	$(VENV)/bin/decobench sweep $(SUITE) --out $(RESULTS) $(DATA_FLAGS) $(if $(JOBS),--jobs $(JOBS))
	$(VENV)/bin/decobench report $(RESULTS)

# Issue 43's GPU check (docs/suites.md "gpu-stability"): GPT-2 124M, D-SGD and DeCo-SGD with
# clipping, 300 iterations at γ 0.01 and 200 at γ 0.05, on one GPU (about 10 minutes on an
# H200; docs/results/gpu-stability.md), then each run's measured
# per-iteration times (RESULTS_GPU/step_times.json, in the units of benchmark/sweeps/cost.py)
# and loss curves (RESULTS_GPU/curves.csv). GPU_SUITE=gpu-1000: issue 43 point 3's
# 1,000-iteration comparison instead (docs/suites.md "gpu-1000").
GPU_SUITE   ?= gpu-stability
RESULTS_GPU ?= results/$(GPU_SUITE)
gpu-check: $(STAMP)
	$(VENV)/bin/decobench sweep $(GPU_SUITE) --out $(RESULTS_GPU) $(DATA_FLAGS) --jobs 1 --no-wandb
	$(PY) -m decobench.sweeps.cost $(RESULTS_GPU)

# CI smoke benchmark (docs/ci.md): run SUITE afresh into CHECK_RESULTS (a fresh folder: a
# results folder of older code would be resumed, not rerun), write its report, and compare it
# with the golden results GOLDEN: exit 1 when a cell regressed or is missing.
# `make smoke-golden` accepts a fresh run as the new golden file (git diff shows what moved).
GOLDEN        ?= benchmark/suites/golden/$(notdir $(basename $(SUITE))).json
CHECK_RESULTS ?= results/$(notdir $(basename $(SUITE)))-check
smoke-run: $(STAMP) $(if $(STANDIN_DEPS),$(STANDINS)/README.txt)
	rm -rf $(CHECK_RESULTS)
	-$(VENV)/bin/decobench sweep $(SUITE) --out $(CHECK_RESULTS) $(DATA_FLAGS) --no-progress \
	  $(if $(JOBS),--jobs $(JOBS))
	-$(VENV)/bin/decobench report $(CHECK_RESULTS) > /dev/null

smoke-check: smoke-run
	$(VENV)/bin/decobench compare $(GOLDEN) $(CHECK_RESULTS)

smoke-golden: smoke-run
	$(VENV)/bin/decobench compare $(if $(wildcard $(GOLDEN)),$(GOLDEN),$(CHECK_RESULTS)) \
	  $(CHECK_RESULTS) --save $(GOLDEN)

# The smoke suite's data slices from their public sources, SHA-256 checked (for machines
# without ../shared/data: FMNIST_ROOT=data/slices/fashion-mnist-mini
# WIKITEXT_ROOT=data/slices/wikitext-2; the CI workflow does this).
data-slices: $(STAMP)
	$(VENV)/bin/decobench data slices --out data/slices

# The offline ImageNet stand-in (decobench data standins), byte-for-byte reproducible from
# the CIFAR-10 slice (without it: from the full CIFAR-10, downloaded).
$(STANDINS)/README.txt: $(STAMP)
	$(VENV)/bin/decobench data standins --out $(STANDINS) --overwrite \
	  $(if $(CIFAR10_ROOT),--cifar10-root $(CIFAR10_ROOT),--download)

lint: $(STAMP)
	$(VENV)/bin/ruff check benchmark baselines netem reports tests

clean:
	rm -rf $(VENV) results bench-results $(STANDINS)
