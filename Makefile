# Two entry points do all set-up on a fresh machine:
#   make serve   - start the name server + broker with embedded defaults
#   make test    - install everything the tests need, lint, run every test
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test setup lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)
	@if [ -f compat_tests/node/package.json ]; then \
	  (cd compat_tests/node && npm ci --no-audit --no-fund --loglevel=error); fi
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing a Java runtime for Spark"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless) ; }

serve: $(STAMP)
	$(BIN)/rmqgate serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) compat_tests/node/node_modules .pytest_cache .hypothesis
