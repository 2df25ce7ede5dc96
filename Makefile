# The two commands of the README: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck bench clean bytecode
PACKAGES := agent_core sessions gateway bindings migrations

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Bytecode written up front (only what changed is compiled again): the suite starts hundreds of
# daemons and gatewayctl processes, and with PYTHONDONTWRITEBYTECODE set each would compile every
# module it imports from source.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q $(PACKAGES) bench tests >/dev/null

run: $(STAMP) bytecode
	$(BIN)/gatewayd $(ARGS)

# The suite waits on daemons and subprocesses more than it computes: three workers keep two
# cores busy. PYTEST_WORKERS=0 runs it in this process, one test after another.
PYTEST_WORKERS ?= 3

test: $(STAMP) bytecode
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check agent_core sessions gateway bindings migrations tests bench
	$(BIN)/mypy

bench: $(STAMP)
	for b in agent_loop store fanout sessions runs startup churn; do $(BIN)/python -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
