"""axe-core on every page a person can reach (tests/pages.py), in light and dark, with
JavaScript on and off: no violation of any impact.

Light and dark: each page is loaded once (a tab with JavaScript, one without) and checked in
both, its colour scheme switched between the two runs of axe, as conftest's light_and_dark
pictures a page. The theme is the stylesheets' alone: static/app.css and static/code.css
change colours (and, in code, bold and italic) under `prefers-color-scheme`, and neither a
template nor a script reads the scheme (app.js's one matchMedia asks for a touch screen), so
a page's DOM is the same in both. So in dark only the rules whose outcome colours decide run
again: those of the light run's rules that axe tags `cat.color` (color-contrast and
link-in-text-block in axe-core 4.14). Every rule run in both schemes on every page and mode
(a throwaway test, 2026-12-07) found the same nodes, passing or not, in light and dark. A
page loaded in each scheme, every rule run in both, took the file alone 88 and 86 s (53 s of
CPU); loaded once, 56 and 48 s (30 s of CPU), A/B alternated on 2 cores.

axe-core is the npm package `make npm-tools` installs under .cache/npm (pinned in the Makefile);
the tests never fetch it. It is evaluated in the page through Playwright (not a <script>
tag, which the Content-Security-Policy would refuse): once per tab, as a script the context
runs in every top document, and each page is loaded in turn into its tab.

JavaScript off: Chromium with script disabled still lets Playwright evaluate, but axe.run
never finishes there (no timer of the page runs). So a page "without JavaScript" is loaded
in a context with script on whose documents arrive with every <script> element taken out
and every <noscript> unwrapped: the DOM a browser without JavaScript builds from the same
HTML, with nothing of ours running in it, in which axe can run.

`pytest -s tests/test_axe.py` prints the violations found per page and mode.
"""
from __future__ import annotations

import re

import pytest

from tests.conftest import ON_POSTGRES, ROOT
from tests.pages import PAGES, Page, World, world

pytestmark = pytest.mark.browser

AXE = ROOT / ".cache" / "npm" / "node_modules" / "axe-core" / "axe.min.js"
MODES = [("light", True), ("light", False), ("dark", True), ("dark", False)]  # the table's columns
# axe in the light scheme, every rule: its violations, and which rules it ran (their ids)
EVERY_RULE = """() => axe.run(document, {resultTypes: ['violations']}).then(r => ({violations: r.violations,
    ran: [...r.violations, ...r.passes, ...r.incomplete, ...r.inapplicable].map(rule => rule.id)}))"""
# ... and in dark, those of them whose outcome colours decide
COLOUR_RULES = """ran => axe.run(document, {resultTypes: ['violations'], runOnly: {type: 'rule',
    values: axe.getRules(['cat.color']).map(rule => rule.ruleId).filter(id => ran.includes(id))}})"""
SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.S | re.I)
NOSCRIPT = re.compile(r"</?noscript>", re.I)

found: dict[str, dict[str, str]] = {}  # page -> mode -> violations (rules), for the table


def mode_name(scheme: str, js: bool) -> str:
    return f"{scheme} {'JS' if js else 'no JS'}"


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"axe-core is missing at {AXE}: `make axe` installs it (npm), as `make test` does")
    return AXE.read_text()


@pytest.fixture(scope="module")
def every_page(request, tmp_path_factory) -> World:
    cluster = request.getfixturevalue("pg_cluster") if ON_POSTGRES else None  # TABLETALK_TEST_POSTGRES=1
    with world(tmp_path_factory.mktemp("axe"), cluster) as w:
        yield w


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    if not found:
        return
    modes = [mode_name(*m) for m in MODES]
    width = max(len(name) for name in found)
    print("\n\naxe-core violations per page (rules violated; +n* = known without JS, see tests/pages.py)")
    print(f"{'page':<{width}} | " + " | ".join(modes))
    for name, by_mode in found.items():
        print(f"{name:<{width}} | " + " | ".join(f"{by_mode.get(m, '-')!s:>{len(m)}}" for m in modes))


def without_script(route) -> None:
    if route.request.resource_type != "document":
        route.continue_()
        return
    response = route.fetch()
    route.fulfill(response=response, body=NOSCRIPT.sub("", SCRIPT.sub("", response.text())))


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        nodes = v["nodes"]
        lines.append(f"{v['id']} ({v['impact']}): {v['help']} -- {len(nodes)} element(s), e.g. "
                     f"{[n['target'] for n in nodes[:3]]}: {nodes[0].get('failureSummary', '')}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def tabs(browser, axe_source: str):
    """One tab with JavaScript and one without, each page loaded into it in turn: a context or
    a tab of its own for each of the 180 tests (each a renderer process started) was two
    thirds of this file's time. axe-core is given to the context once, as a script run before
    the page's own in each top document (so neither the CSP nor sending its ~560 KB again for
    each page is in the way; frames are left out, as when it was evaluated in the page). A
    page that refreshes itself (a meta refresh, in it or a frame) gets its tab closed after
    it, so its refresh cannot cut into the next page's load."""
    opened: dict[bool, object] = {}
    top_only = f"if (window.top === window) (function () {{ {axe_source}\n}}).call(window);"

    def tab(js: bool):
        if js not in opened:
            context = browser.new_context(color_scheme="light", viewport={"width": 1280, "height": 800})
            context.add_init_script(script=top_only)
            if not js:
                context.route("**/*", without_script)
            opened[js] = context.new_page()
        elif opened[js].is_closed():
            opened[js] = opened[js].context.new_page()
        return opened[js]

    yield tab
    for p in opened.values():
        p.context.close()


def refreshes(p) -> bool:
    return any(f.locator('meta[http-equiv="refresh" i]').count() for f in p.frames)


@pytest.mark.parametrize("js", [True, False], ids=["JS", "no-JS"])
@pytest.mark.parametrize("page", PAGES, ids=[p.name.replace(" ", "-") for p in PAGES])
def test_no_axe_violations(tabs, every_page: World, page: Page, js: bool):
    if js and page.only_without_js:
        pytest.skip("a page only a browser without JavaScript loads")
    base = every_page.url(page)
    p = tabs(js)
    origin = (every_page.fresh if page.fresh else every_page.served).url
    p.context.clear_cookies()  # whoever the page is for, and no one else (the last page's sign-in may differ)
    p.context.add_cookies([{"name": k, "value": v, "url": origin} for k, v in every_page.cookies_for(page).items()])
    try:  # a page that failed leaves its tab behind, with whatever it was doing
        response = p.goto(base)
        assert response is not None and response.status == page.status, (base, response and response.status)
        if js and p.locator("script[src]").count():  # a page with our script: once it has run
            p.wait_for_function("() => window.htmx && document.documentElement.classList.contains('js')")
        if page.shows:
            assert p.locator(page.shows).count() > 0, f"{page.name} shows {page.shows}"
        light = p.evaluate(EVERY_RULE)
        p.emulate_media(color_scheme="dark")
        found_in = {"light": light["violations"], "dark": p.evaluate(COLOUR_RULES, light["ran"])["violations"]}
        p.emulate_media(color_scheme="light")
    except BaseException:
        p.close()
        raise
    if refreshes(p):
        p.close()
    said = []
    for scheme, violations in found_in.items():
        known = [v for v in violations if not js and v["id"] in page.known_without_js]
        violations = [v for v in violations if v not in known]
        found.setdefault(page.name, {})[mode_name(scheme, js)] = f"{len(violations)}{'+%d*' % len(known) if known else ''}"
        if violations:
            said.append(f"{scheme}:\n{describe(violations)}")
    assert not said, "\n".join(said)


def test_every_page_is_listed_once():
    names = [p.name for p in PAGES]
    assert len(names) == len(set(names)), "a page's name is its test id"
