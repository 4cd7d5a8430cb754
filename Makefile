# `make help` lists the targets. Every target creates the virtualenv it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/errortrack: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[openapi]'
	@touch $@

$(VENV)/.dev: $(BIN)/errortrack
	$(BIN)/pip install -q -e '.[openapi,dev]'
	@touch $@

# DSNs and invitation links are built from ERRORTRACK_PUBLIC_URL: unless it is set, they
# point where this target serves (its default, port 8000, is wrong for PORT=...).
run: $(BIN)/errortrack ## Create the virtualenv, install, and serve on http://$(HOST):$(PORT) (embedded stores)
	ERRORTRACK_PUBLIC_URL="$${ERRORTRACK_PUBLIC_URL:-http://$(HOST):$(PORT)}" $(BIN)/errortrack serve --host $(HOST) --port $(PORT)

install-dev: $(VENV)/.dev ## Install the package with the dev and openapi extras

# @sentry/node for the Node end-to-end test, pinned by package-lock.json.
tests/e2e/node/node_modules: tests/e2e/node/package-lock.json
	npm ci --prefix tests/e2e/node --no-audit --no-fund
	@touch $@

# Debian's Chromium for the browser test of /docs (tests/e2e/test_docs_browser.py).
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" -ne 0 ] && command -v sudo)
$(CHROMIUM):
	$(SUDO) apt-get install -y chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }

test-deps: $(VENV)/.dev tests/e2e/node/node_modules $(CHROMIUM) ## Install what the test suite drives (CI runs this once before two suites at once)

test: test-deps ## Run the whole test suite (set ERRORTRACK_TEST_DATABASE_URL for Postgres)
	$(BIN)/python -m pytest

lint: $(VENV)/.dev ## ruff (lint and format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

permissions: $(VENV)/.dev ## Regenerate docs/permissions.md from the permission table (tests/access_matrix.py)
	$(BIN)/python -m tests.access_matrix

format: $(VENV)/.dev ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

openapi: $(VENV)/.dev ## Regenerate the OpenAPI snapshot schemas/openapi.json from the code
	$(BIN)/python -m errortrack.api.openapi > schemas/openapi.json.tmp
	mv schemas/openapi.json.tmp schemas/openapi.json

.PHONY: help run install-dev test-deps test lint format permissions openapi
