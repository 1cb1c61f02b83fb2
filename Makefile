# decobench: two commands do everything on a fresh machine: `make reproduce` and `make test`.
# Each creates or refreshes the virtual environment in .venv from pyproject.toml first.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Offline slice of Fashion-MNIST when ../shared is beside the checkout; otherwise download.
FMNIST_ROOT ?= $(wildcard ../shared/data/fashion-mnist-mini)
DATA_FLAG   := $(if $(FMNIST_ROOT),--data-root $(FMNIST_ROOT),)
RESULTS     ?= results/reproduce
TRACE       ?= wan-200ms-lowbw-varying
WORKERS     ?= 4
TARGET      ?= 0.75
METHODS     ?= d-sgd accordion dga cocktail-sgd deco-sgd

.PHONY: venv test test-slow bench reproduce lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) -m benchmark.bench --out bench-results/bench.json

# The five methods of the paper's comparison on CNN@FashionMNIST under the bundled
# high-latency, low-bandwidth varying trace, then the time-to-target table with speed-ups
# over D-SGD and CocktailSGD (results/reproduce/report.md).
reproduce: $(STAMP)
	for method in $(METHODS); do \
	  $(VENV)/bin/decobench run --task cnn-fmnist --method $$method --workers $(WORKERS) \
	    --trace $(TRACE) --target $(TARGET) $(DATA_FLAG) \
	    --out $(RESULTS)/cnn-fmnist__$$method --overwrite || exit 1; \
	done
	$(VENV)/bin/decobench report $(RESULTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check benchmark baselines netem reports tests

clean:
	rm -rf $(VENV) results bench-results
