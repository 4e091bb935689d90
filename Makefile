# One-command entry points. `make run` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_QUIET ?= -q
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip prints one "Location ... is ignored" warning per package on this machine's mirror: hide them
QUIETPIP := { grep -v "^WARNING: Location" || true; }

.PHONY: setup run test test-fast ui clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) -r requirements-dev.txt 2>&1 | $(QUIETPIP)
	$(PY) -c "import torch, torchvision, mlflow, deepspeed"
	touch $@

setup: $(VENV)/.installed

# The main job on CPU against the embedded default store (sqlite:///mlflow.db in this folder).
run: setup
	$(PY) -m train --model resnet18 --batch 16 --device cpu

test: setup
	$(VENV)/bin/ruff check --select F,E9 --output-format concise .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q

ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db

clean:
	rm -rf $(VENV)
