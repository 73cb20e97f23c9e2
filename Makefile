# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Both create the virtual environment on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; basketgnn needs Python 3.11 (set PYTHON=...)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/basketgnn demo --out runs/demo

test: $(STAMP)
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check basketgnn tests

clean:
	rm -rf $(VENV) runs/demo runs/pipeline-example
