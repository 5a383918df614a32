"""Docs that cannot drift: every setting is in the README, the quick start is two commands."""
from pathlib import Path

from app.config import SETTINGS

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
