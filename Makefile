# Every target sets the machine up first (idempotent: seconds once done).
.PHONY: setup demo test test-fast overhead

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/specdraft demo

test: setup
	.venv/bin/python -m pytest -q -ra

test-fast: setup
	.venv/bin/python -m pytest -q -ra tests

overhead: setup
	.venv/bin/specdraft overhead --json benchmarks/results/overhead.json
