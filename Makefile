# Every target sets the machine up first (idempotent: seconds once done).
# `make demo` sets up only what the demo needs (scripts/setup.sh --demo); the others set up everything.
.PHONY: setup setup-demo demo test test-fast overhead

setup:
	bash scripts/setup.sh

setup-demo:
	bash scripts/setup.sh --demo

# setup --demo installs specdraft's wheel (not editable): tell it where setup put the model
demo: setup-demo
	SPECDRAFT_HOME=$${SPECDRAFT_HOME:-$(CURDIR)/.cache/specdraft} .venv/bin/specdraft demo

test: setup
	.venv/bin/python -m pytest -q -ra --durations=25

test-fast: setup
	.venv/bin/python -m pytest -q -ra tests

overhead: setup
	.venv/bin/specdraft overhead --json benchmarks/results/overhead.json
