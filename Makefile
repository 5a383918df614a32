# Two commands matter: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup run test migrate browser npm-tools bench clean

setup: $(STAMP)

# Reinstall only when the package's declared dependencies change.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || { $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet --disable-pip-version-check -U pip; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

run: setup
	$(BIN)/tabletalk serve --host $(HOST) --port $(PORT)

migrate: setup
	$(BIN)/tabletalk migrate

# Browser tests drive Debian's Chromium, never a downloaded browser.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# npm packages the tests run (never fetched by the tests themselves), pinned, in one folder:
# .cache/npm/node_modules. Add a package to NPM_TOOLS; a changed list installs again.
# Debian's npm is installed when missing, as `browser` does for Chromium.
NPM_TOOLS := @modelcontextprotocol/server-everything@2026.8.31 axe-core@4.14.1 @playwright/mcp@0.0.83
NPM_STAMP := .cache/npm/.installed-$(shell echo '$(NPM_TOOLS)' | cksum | cut -d' ' -f1)

npm-tools: $(NPM_STAMP)

$(NPM_STAMP):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian's npm for the tests that run npm packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm install --silent --no-save --no-audit --no-fund --prefix .cache/npm $(NPM_TOOLS)
	rm -f .cache/npm/.installed-*
	touch $@

test: setup browser npm-tools
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .cache
