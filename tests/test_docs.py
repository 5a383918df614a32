"""Docs that cannot drift: every setting is in the README, the quick start is two commands."""
import re
from pathlib import Path

from app.config import SETTINGS
from app.store import schema

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_documented_in_the_readme():
    missing = [name for name in SETTINGS if f"| `{name}` |" not in README]
    assert missing == [], f"settings missing from the README table: {missing}"


def test_the_quick_start_is_make_run_and_make_test():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick.splitlines() if line.strip().startswith("make ")]
    assert commands == ["make run", "make test"]


def test_the_code_reads_no_setting_the_config_does_not_know():
    import re
    app = Path(__file__).resolve().parent.parent / "app"
    read = set()
    for path in app.rglob("*.py"):
        read |= set(re.findall(r'os\.environ(?:\.get)?\(\s*["\']([A-Z_]+)', path.read_text()))
        read |= set(re.findall(r'os\.getenv\(\s*["\']([A-Z_]+)', path.read_text()))
    assert read <= set(SETTINGS), f"read outside config.py's table: {read - set(SETTINGS)}"


def test_where_things_are_kept_reads_the_same_in_the_readme_and_the_config():
    """The rows of TABLETALK_DATA and DATABASE_URL say what each engine keeps where: the
    README's words are config.py's (backticks and the link to the design aside)."""
    import re
    for name in ("TABLETALK_DATA", "DATABASE_URL"):
        row = re.search(rf"^\| `{name}` \| [^|]* \| (.*) \|$", README, re.M).group(1)
        words = re.sub(r"\s*See \[[^\]]*\]\([^)]*\)\.$", "", row).replace("`", "")
        assert words == SETTINGS[name][1], name


ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_map() -> set[str]:
    """The modules the README's map under "How it fits together" names: a top-level line
    names a module or a package (`app/x.py`, `app/x/`), an indented one a module of the
    package above it (`  y.py`, or `  a.py, b.py` for two)."""
    block = README.split("## How it fits together", 1)[1].split("```", 2)[1]
    named, package = set(), ""
    for line in block.splitlines():
        if not line.strip():
            continue
        head = line.split("  ", 1)[0] if not line.startswith(" ") else line.strip().split("  ", 1)[0]
        if not line.startswith(" "):
            package = head if head.endswith("/") else ""
            if head.endswith(".py"):
                named.add(head)
            continue
        for name in head.split(","):
            name = name.strip()
            if name.endswith(".py") or name.endswith("/"):
                named.add(package + name)
    return named


def test_every_module_of_app_is_in_the_readme_map():
    """Every module under app/ is on the README's map, and the map names nothing that is not
    there (a package's __init__.py is its package's line; a folder the map names, such as
    the frozen history/, stands for the modules in it)."""
    named = readme_map()
    folders = {n for n in named if n.endswith("/")}
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "app").rglob("*.py")
               if p.name != "__init__.py" or p.parent == ROOT / "app"}
    missing = sorted(m for m in modules - named - {"app/__init__.py"}
                     if not any(m.startswith(f) and m[len(f):].count("/") == 0 and f.count("/") > 1 for f in folders))
    assert missing == [], f"modules missing from the README's map: {missing}"
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert gone == [], f"the README's map names what is not there: {gone}"


# a path of this tree as the docs write it: from one of its top folders, or a file at the top
PATH = re.compile(r"(?<![\w./-])((?:app|tests|templates|static|docs|benchmarks)/[\w./-]*\w/?|Makefile|pyproject\.toml)")


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in PATH.finditer(text)}


def test_every_path_a_doc_names_exists():
    """A path in a doc (`app/run/turn.py`, `templates/_item.html`, `docs/postgres.md` ...)
    is a file or folder of this tree, so a move or a rename that forgets a doc fails here.
    Paths of the running install's data folder (`data/files/`) are not this tree's."""
    missing = []
    for doc in DOCS:
        for path in sorted(named_paths(doc.read_text())):
            if not (ROOT / path).exists() and not any(ch in path for ch in "*{"):
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert missing == [], "paths the docs name that do not exist:\n" + "\n".join(missing)


def test_the_readmes_defaults_are_the_configs():
    """The Default column of the README's settings table is config.py's default: the same
    text in backticks, or "(empty)"/"(none)" where the default is empty, or a word in
    parentheses for a default that is worked out (AI_MODEL's "first listed")."""
    wrong = []
    for name, (default, _) in SETTINGS.items():
        row = re.search(rf"^\| `{name}` \| ([^|]*) \|", README, re.M)
        shown = row.group(1).strip()
        if default:
            ok = shown == f"`{default}`"
        else:
            ok = shown in ("(empty)", "(none)") or (shown.startswith("(") and shown.endswith(")"))
        if not ok:
            wrong.append(f"{name}: README {shown!r}, config.py {default!r}")
    assert wrong == [], "\n".join(wrong)


def test_a_package_that_lists_its_modules_lists_them_all():
    """A package's docstring that names three or more of its modules (`name.py`, or ``name``
    under a "Parts" heading) names every one."""
    import ast

    for init in sorted((ROOT / "app").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(r"\b(\w+)\.py\b", doc))
        if "\nParts\n" in doc:
            named |= set(re.findall(r"^``(\w+)``", doc.split("\nParts\n", 1)[1], re.M))
        modules = {p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"}
        if len(named & modules) >= 3:
            assert modules <= named, f"{init.relative_to(ROOT)} does not name {sorted(modules - named)}"


def test_the_schema_page_is_made_from_both_engines(pg_url):
    """docs/schema.md is what app/store/schema_page.py makes from a new SQLite database and a
    new PostgreSQL one: a migration that lands without the page made again fails here."""
    from app.store import db as dbm
    from app.store import schema_page

    db = dbm.connect(pg_url)
    try:
        schema.migrate(db)
        made = schema_page.page(schema_page.sqlite_tables(), schema_page.postgres_tables(db))
    finally:
        db.conn.close()
    assert (ROOT / "docs" / "schema.md").read_text() == made, \
        "docs/schema.md is out of date: python -m app.store.schema_page URL > docs/schema.md"


def test_the_schema_pages_sqlite_half_is_sqlites():
    """The same check for SQLite's half, without PostgreSQL (make test-fast): its migrations
    in order, and every table's SQLite column."""
    from app.store.schema import migrations
    from app.store import schema_page

    doc = (ROOT / "docs" / "schema.md").read_text()
    listed = re.findall(r"^\| \d+ \| `(m\w+)` \|", doc.split("| PostgreSQL (", 1)[0], re.M)
    assert listed == [fn.__name__ for fn in migrations.MIGRATIONS]
    for name, columns in schema_page.sqlite_tables().items():
        assert f"\n### {name}\n" in doc, name
        section = doc.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        for column in columns:
            assert f"| `{column['name']}` | {schema_page.cell(column)} |" in section, f"{name}.{column['name']}"
