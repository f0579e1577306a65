# icegov developer entry points. Each target sets up what it needs first (deploy/setup.sh).
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# benchmarks/commits.py: e.g. --quick, or --rows 5x20,10x50 (default: seed 002's six rows, long)
COMMITS_ARGS ?=

.PHONY: serve test lint unit bench clean

serve:  ## set up and run `icegov serve` on the embedded catalog (./warehouse)
	@bash deploy/setup.sh
	@$(BIN)/icegov serve $(ARGS)

test:  ## set up and run lint, type checks and the whole test suite (real Spark included)
	@bash deploy/setup.sh test
	$(BIN)/ruff check proxy tests benchmarks
	$(BIN)/mypy proxy
	$(BIN)/python -m pytest $(ARGS)

lint:
	@bash deploy/setup.sh test
	$(BIN)/ruff check proxy tests benchmarks
	$(BIN)/mypy proxy

unit:  ## the fast tests only (no Spark, no JDK)
	@bash deploy/setup.sh test
	$(BIN)/python -m pytest tests/unit $(ARGS)

bench:  ## run the benchmarks and print their tables
	@bash deploy/setup.sh
	$(BIN)/python benchmarks/passthrough.py $(ARGS)
	$(BIN)/python benchmarks/commit.py $(ARGS)
	$(BIN)/python benchmarks/commits.py $(COMMITS_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache warehouse
