# Two entry points do all set-up on a fresh machine:
#   make serve   - start the name server + broker with embedded defaults (core dependencies only;
#                  SERVE_ARGS="--brokers auto" runs one broker process per core)
#   make test    - install everything the tests need, lint, run every test
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.installed-serve

CLIENTS := .venv-clients
CLIENT_REQS := $(wildcard compat_tests/clients/requirements-*.txt)

.PHONY: serve test setup lint bench clean adversity

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Serving needs the core dependencies only; the tests' extras (pyspark, scapy, ...) include them.
$(SERVE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(SERVE_STAMP)

# Third-party Python clients that share the import name ``rocketmq`` live in their own target dirs;
# the official 2.0.0 wrapper needs the C++ core that rocketmq-python-cvs bundles (CLIENTS.md).
$(CLIENTS)/.installed: $(STAMP) $(CLIENT_REQS)
	rm -rf $(CLIENTS) && mkdir -p $(CLIENTS)
	for req in $(CLIENT_REQS); do \
	  name=$$(basename $$req .txt); name=$${name#requirements-}; \
	  $(BIN)/python -m pip install -q --no-deps --target $(CLIENTS)/$$name -r $$req || exit 1; \
	done
	cp "$$($(BIN)/python -c 'import os, rocketmq; print(os.path.join(os.path.dirname(rocketmq.__file__), "librocketmq.so"))')" \
	  $(CLIENTS)/rocketmq-client-python200/rocketmq/
	touch $@

setup: $(STAMP) $(CLIENTS)/.installed
	@if [ -f compat_tests/node/package.json ]; then \
	  (cd compat_tests/node && npm ci --no-audit --no-fund --loglevel=error); fi
	@command -v javac >/dev/null 2>&1 || { \
	  echo "installing a JDK (Spark, the stock Java RocketMQ servers and the Java client programs)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless) ; }
	@command -v tshark >/dev/null 2>&1 || { \
	  echo "installing tshark (the Wireshark dissector's tests)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark) ; }
	@command -v strace >/dev/null 2>&1 || { \
	  echo "installing strace (the metadata store's no-fsync-per-commit test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace) ; }

serve: $(SERVE_STAMP)
	$(BIN)/rmqgate serve $(SERVE_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The second run is the compat suite against the stock Java 4.9.8 name server + broker (the flows on a
# Java pair with FEATURE_CONF's settings): every test not marked rmqgate_only must pass there too.
# Left out of it: the java-marked modules (they run both brokers in the first run already), the
# rmqgate restart test and the drivers' self-test (no broker at all).
#
# Both runs spread whole modules over TEST_WORKERS pytest-xdist processes (module fixtures start once;
# each worker starts its own session brokers and picks ports from its own range): most tests wait on
# JVMs, rebalances and long polls, so two workers keep both cores busy. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest --durations=25 -n $(TEST_WORKERS) --dist loadfile

test: setup lint
	$(PYTEST) $(PYTEST_ARGS)
	$(PYTEST) compat_tests --target java -m "not rmqgate_only and not java" \
	  --ignore=compat_tests/test_drivers.py \
	  --deselect=compat_tests/test_mixed_cluster.py::test_clean_restart_keeps_topics_messages_and_offsets

# Hostile and pathological load against a live `rmqgate serve` (compat_tests/adversity/); not part of
# `make test`. ADVERSITY_FRAMES sets the hostile-frame count (default one million); figures go to stdout
# and build/adversity/ (or $$ADVERSITY_OUT).
adversity: setup
	RMQGATE_ADVERSITY=1 ADVERSITY_FRAMES=$${ADVERSITY_FRAMES:-1000000} \
	  $(BIN)/python -m pytest -p no:cacheprovider -s -v compat_tests/adversity $(PYTEST_ARGS)

bench: $(STAMP)
	for b in bench/[!_]*.py; do $(BIN)/python $$b || exit 1; done

# The scale-out run's bundle for a lent device machine (no Java, no network there): build/device/,
# carried by `bash bench/device/scaleout.sh` (README, Benchmarks).
.PHONY: device-bundle
device-bundle:
	bash bench/device/bundle.sh

clean:
	rm -rf $(VENV) $(CLIENTS) compat_tests/node/node_modules .pytest_cache .hypothesis
