# One-command entry points. `make run` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_QUIET ?= -q
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip prints one "Location ... is ignored" warning per package on this machine's mirror: hide them
QUIETPIP := { grep -v "^WARNING: Location" || true; }

.PHONY: setup run test test-fast ui clean device-wheels

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) -r requirements-dev.txt 2>&1 | $(QUIETPIP)
	$(PY) -c "import torch, torchvision, mlflow, deepspeed"
	touch $@

setup: $(VENV)/.installed

# The main job on CPU against the embedded default store (sqlite:///mlflow.db in this folder).
run: setup
	$(PY) -m train --model resnet18 --batch 16 --device cpu

# Two test processes (pytest-xdist): most of the suite's time is child processes importing torch,
# mlflow and deepspeed, one core each. --dist loadfile keeps a file's tests, and so its module
# fixtures, in one process. TEST_WORKERS=0 runs them in this process, one at a time.
TEST_WORKERS ?= 2

test: setup
	$(VENV)/bin/ruff check --select F,E9 --output-format concise .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile

ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db

clean:
	rm -rf $(VENV)

# The wheel set for a GPU machine without a network (docs/gpu.md): cp312 manylinux wheels of
# requirements-device.txt and a pure-Python DeepSpeed wheel, into .device-wheels/ (git-ignored).
# Needs the project venv (torch, to build DeepSpeed's wheel) and a network.
DEVICE_WHEELS := .device-wheels
DEVICE_PLATFORMS := manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_25_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
DEEPSPEED_VERSION ?= 0.19.8
DEVICE_EXTRA ?=

device-wheels: setup
	rm -rf $(DEVICE_WHEELS) && mkdir -p $(DEVICE_WHEELS)
	$(PY) -m pip download $(PIP_QUIET) --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp $(foreach p,$(DEVICE_PLATFORMS),--platform $(p)) \
		-d $(DEVICE_WHEELS) -r requirements-device.txt $(DEVICE_EXTRA) 2>&1 | $(QUIETPIP)
	DS_BUILD_OPS=0 $(PY) -m pip wheel $(PIP_QUIET) --no-deps --no-build-isolation \
		-w $(DEVICE_WHEELS) deepspeed==$(DEEPSPEED_VERSION) 2>&1 | $(QUIETPIP)
	@echo "$(DEVICE_WHEELS): $$(ls $(DEVICE_WHEELS)/*.whl | wc -l) wheels," \
		"$$(du -cb $(DEVICE_WHEELS)/*.whl | tail -1 | awk '{printf "%.1f MiB", $$1 / 1048576}')"
