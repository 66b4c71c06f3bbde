# The README's two commands: `make up` and `make test`. Both set up .venv first.
.PHONY: setup up test bench clean

ARGS ?=
BENCH ?= apiserver

setup:
	@scripts/setup.sh

up: setup
	.venv/bin/lahar up --demo $(ARGS)

test: setup
	.venv/bin/python -m pytest -q $(ARGS)

bench: setup
	.venv/bin/lahar bench $(BENCH) $(ARGS)

clean:
	rm -rf .venv build *.egg-info .pytest_cache
