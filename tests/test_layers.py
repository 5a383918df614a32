"""The layers of app/ as docs/architecture.md names them, held by the code: a module imports
its own package and the layers below it, never one above; no import cycle, whatever the
order modules are loaded in; no import made inside a function or under TYPE_CHECKING to
dodge one. Read from each module's syntax tree (every import, at any depth), and, in a
process of its own, by importing each module alone."""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

# Imports left inside a function on purpose, each with its reason: (module, what it imports).
HIDDEN_ON_PURPOSE = {
    ("app.store.db", "app.store.postgres"): "psycopg is loaded only for a PostgreSQL URL (SQLite's installs never pay for it)",
    ("app.admin.cli", "app.admin.move"): "move-to loads psycopg, which serve and every other command on SQLite never need",
    ("app.store.outage", "app.store.postgres"): "psycopg's errors are read only when one was raised, so psycopg is loaded already",
}

# What is not done yet (issue 29), each with its reason: test_the_known_gaps_are_still_open
# fails once one is closed, so the list shrinks with the code.
KNOWN_GAPS = {
}


def module_of(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


MODULES = {module_of(p)[0]: p for p in sorted(APP.rglob("*.py"))}


def unit(module: str) -> str:
    """A module's place in the layers: its package under app/, or its own name at the root."""
    return module.split(".")[1] if module != "app" else "app"


@functools.cache  # app/'s syntax trees, read once for the five checks that walk them (~1.2 s each)
def imports() -> tuple[tuple[str, str, str, int], ...]:
    """Every import of an app module: (module, imported module, how: top|function|typing, line)."""
    out = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        top = {id(n) for n in tree.body}
        typing = {id(x) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                  for x in ast.walk(n)}
        for n in ast.walk(tree):
            targets = []
            if isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = ".".join(pkg[:len(pkg) - n.level + 1] + ([n.module] if n.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in n.names]
            elif isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            how = "typing" if id(n) in typing else "top" if id(n) in top else "function"
            out += [(name, t, how, n.lineno) for t in targets if t == "app" or t.startswith("app.")]
    return tuple(out)


def layers() -> dict[str, int]:
    """docs/architecture.md's numbered list under "Where things live": the names in
    backticks on line N are layer N."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    part = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    out = {}
    for number, line in re.findall(r"^(\d+)\. (.*)$", part, re.M):
        for name in re.findall(r"`(\w+)`", line):
            out[name] = int(number)
    return out


def test_every_package_and_root_module_has_a_layer():
    named = layers()
    missing = sorted({unit(m) for m in MODULES if m != "app"} - set(named))
    assert missing == [], f"in no layer of docs/architecture.md: {missing}"
    gone = sorted(set(named) - {unit(m) for m in MODULES})
    assert gone == [], f"docs/architecture.md's layers name what app/ does not hold: {gone}"


def upward() -> set[tuple[str, str]]:
    named = layers()
    out = set()
    for src, dst, _, _ in imports():
        a, b = unit(src), unit(dst)
        if a == b or dst == "app":
            continue
        # the root's modules are one layer and may import each other; any other layer only those below it
        if named[b] > named[a] or named[b] == named[a] and named[a] != 1:
            out.add((src, dst))
    return out


def test_no_module_imports_a_layer_above_its_own():
    wrong = sorted(e for e in upward() if e not in KNOWN_GAPS)
    assert wrong == [], "imports of a layer above (or beside) their own:\n" + "\n".join(f"{a} -> {b}" for a, b in wrong)


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    """Every import counts, at any depth (one hidden in a function still ties two modules):
    a package's __init__ that only hands on its modules' names is not a module of the cycle
    its modules import it for."""
    edges = {(a, b) for a, b, _, _ in imports() if a != b and (a, b) not in KNOWN_GAPS and (a, b) not in HIDDEN_ON_PURPOSE}
    found = cycles(edges)
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_is_hidden_in_a_function():
    hidden = sorted(f"{a}:{line} imports {b} ({how})" for a, b, how, line in imports()
                    if how != "top" and (a, b) not in HIDDEN_ON_PURPOSE and (a, b) not in KNOWN_GAPS)
    assert hidden == [], "imports made inside a function or under TYPE_CHECKING:\n" + "\n".join(hidden)


def test_the_known_gaps_are_still_open():
    """A gap that is closed leaves KNOWN_GAPS, so the list says what is left."""
    found = {(a, b) for a, b, how, _ in imports() if how != "top"} | upward()
    closed = sorted(set(KNOWN_GAPS) - found)
    assert closed == [], f"closed: take them out of KNOWN_GAPS: {closed}"


@pytest.mark.process
@pytest.mark.timeout(600)
def test_every_module_imports_on_its_own():
    """Each module of app/, imported first in a fresh interpreter (a fork of one that has
    loaded only the libraries), loads: no module needs another loaded before it. The libraries
    are every module outside app/ that importing all of app/ loads (found by a first fork), so
    that each module's own fork imports only app/'s code: 200 forks cost ~29 s of CPU when
    each imported litestar's, openapi's and numpy's submodules again."""
    script = """
import importlib, os, sys
read, write = os.pipe()
if os.fork() == 0:  # which libraries app/ loads, found in a child so that none of app/ stays here
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except BaseException:  # said below, in its own fork
            pass
    found = [n for n in sys.modules if n.split(".")[0] not in ("app", "tests", "__main__")]
    with os.fdopen(write, "w") as pipe:
        pipe.write("\\n".join(found))
    os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    libraries = pipe.read().split()
os.wait()
for name in libraries:
    try:
        importlib.import_module(name)
    except Exception:  # a name a package sets in sys.modules itself (an alias), not importable by name
        pass
assert not [n for n in sys.modules if n == "app" or n.startswith("app.")], "a library imported app/"
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as e:
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(name)
sys.exit(1 if failed else 0)
"""
    done = subprocess.run([sys.executable, "-c", script, *MODULES], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.process
def test_serving_on_sqlite_never_loads_psycopg():
    """What `tabletalk serve` and its workers import (the command line, the web app) loads no
    psycopg: SQLite's installs never pay for PostgreSQL's driver (~0.1 s of every start)."""
    script = "import sys, app.admin.cli, app.web.app; print(sorted(n for n in sys.modules if n.startswith('psycopg')))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"loaded: {done.stdout}"


def test_each_store_method_is_one_familys():
    """Store is one object over its families of rows (one module each, docs/architecture.md):
    a method is found by its family's module, so no two families may define one name (the
    later in the MRO would hide the other)."""
    from app.store import Store

    where: dict[str, list[str]] = {}
    for cls in Store.__mro__:
        if cls.__module__.startswith("app.store") and cls is not Store:
            for name in vars(cls):
                if not name.startswith("__"):
                    where.setdefault(name, []).append(f"{cls.__module__}.{cls.__name__}")
    twice = {name: found for name, found in where.items() if len(found) > 1}
    assert twice == {}, f"defined by more than one family: {twice}"


# Class names two modules define, each with why it is one meaning (docs/architecture.md).
SAME_NAME_ON_PURPOSE = {
    "Unreachable": "could not be reached, in words for a person: a model server's list, the PostgreSQL server",
    "Refused": "refused, in words for a person: a request the address guard will not make, a form the web will not save",
}


def test_no_two_modules_define_a_class_of_one_name():
    """A class named once in app/ (STYLE 15): a reader who meets the name knows which it is."""
    where: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    twice = {c: m for c, m in where.items() if len(m) > 1 and c not in SAME_NAME_ON_PURPOSE}
    assert twice == {}, f"classes of one name in several modules: {twice}"
