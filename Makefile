# The README's two commands: `make demo` and `make test`. Both set up what they need first.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.PHONY: setup demo test test-fast clean

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/quant sweep recipes/demo.yaml

test: setup
	$(PY) -m pytest -ra

test-fast: setup
	$(PY) -m pytest -ra -m "not integration"

clean:
	rm -rf runs .pytest_cache
