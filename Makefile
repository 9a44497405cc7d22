# candor: two commands on a fresh machine — `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | sha256sum | cut -c1-12)
# 2 cores: keep ONNX/BLAS pools from fighting the gRPC loop and each other.
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: install run test check lint typecheck buf protos protos-check unit e2e eval lock clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## run: install, start all three services on the embedded defaults, ingest the sample KB,
## print an answered and a refused question, keep serving (Ctrl-C stops gracefully).
run: install
	$(BIN)/candor serve --demo

## test: static checks, then the whole suite (unit, service, e2e).
test: install check
	$(BIN)/python -m pytest -q

check: lint typecheck buf protos-check

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

buf: install
	$(BIN)/buf lint

protos: install
	$(BIN)/python scripts/gen_protos.py

protos-check: install
	$(BIN)/python scripts/gen_protos.py --check

unit: install
	$(BIN)/python -m pytest -q tests/unit

e2e: install
	$(BIN)/python -m pytest -q tests/e2e tests/service

eval: install
	$(BIN)/python -m evals.sample_kb

lock: install
	(echo "# Exact versions CI installs (pip install -c requirements.lock -e '.[dev]'). Regenerate: make lock"; \
	 $(BIN)/pip freeze --exclude-editable | grep -v '^candor') > requirements.lock

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache .pytest_cache
