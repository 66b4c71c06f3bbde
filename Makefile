# The README's two commands: `make up` and `make test`. Both set up .venv first.
.PHONY: setup up lint test test-fast bench clean

ARGS ?=
BENCH ?= apiserver

setup:
	@scripts/setup.sh

up: setup
	.venv/bin/lahar up --demo $(ARGS)

# ruff, mypy and the import contracts (pyproject.toml): seconds, so `make test` runs them first.
lint: setup
	@scripts/lint.sh

test: lint
	.venv/bin/python -m pytest -q $(ARGS)

# The unit lane (tests/conftest.py): in-process tests only, well under a minute.
test-fast: setup
	.venv/bin/python -m pytest -q -m "unit and not slow" $(ARGS)

bench: setup
	.venv/bin/lahar bench $(BENCH) $(ARGS)

clean:
	rm -rf .venv build *.egg-info .pytest_cache .mypy_cache .ruff_cache
