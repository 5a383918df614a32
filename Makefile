# Two commands matter: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup run test migrate browser axe bench clean

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

# axe-core, for the accessibility tests (tests/test_axe.py): the npm package, pinned, under
# .cache/ (never fetched by the tests themselves). Debian's npm is installed when missing.
AXE_VERSION := 4.14.1
AXE_STAMP   := .cache/axe/.installed-$(AXE_VERSION)

axe: $(AXE_STAMP)

$(AXE_STAMP):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian's npm for the accessibility tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm install --silent --no-save --no-audit --no-fund --prefix .cache/axe axe-core@$(AXE_VERSION)
	touch $@

test: setup browser axe
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .cache
