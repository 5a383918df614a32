"""docs/screenshot.png, the README's picture, made from the running app (so it never shows a
page the app no longer draws):

    .venv/bin/python docs/screenshot.py [PATH]      (or: make screenshot)

It starts `tabletalk serve` in a temporary folder, with the suite's fake model server on
127.0.0.1 answering what is scripted here (no model is needed, nothing leaves the machine),
asks one question through the app's own forms, and photographs the conversation in Debian's
Chromium at 1280x860, light. tests/test_screenshot.py runs it, so a change that breaks it
fails there.
"""
from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import CHROMIUM, CHROMIUM_ARGS, Served, wait_for  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, rate, text, tool_call  # noqa: E402

OUT = ROOT / "docs" / "screenshot.png"
SIZE = {"width": 1280, "height": 860}
QUESTION = "Plan a weekend in Lyon for two, by train from Paris, on a small budget."
PLAN = "- [x] Trains from Paris\n- [x] Where to sleep\n- [ ] What to see"
ANSWER = """Here is a weekend that keeps to a small budget:

| | Saturday | Sunday |
|---|---|---|
| Morning | TGV from Paris Gare de Lyon (2 h) | Fourvière hill and its basilica |
| Afternoon | Vieux Lyon and its *traboules* | Parc de la Tête d'Or (free) |
| Evening | A *bouchon* on rue Mercière | Train home from Part-Dieu |

**Budget** for two: about 240 € (trains booked early ~120 €, a guest house ~80 €, meals ~40 €)."""
EARLIER = ["Summarise the tax form instructions", "Python: read a CSV and sum a column",
           "Ideas for a 7-year-old's birthday", "Feedback on my cover letter"]


def made(out: Path = OUT) -> Path:
    """The screenshot, written to `out`."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="tabletalk-screenshot-") as tmp, \
            FakeModelServer(models={"qwen3:8b": 32768}) as fake:
        fake.plain_default = [text("A weekend in Lyon")]  # the model's name for the conversation
        fake.thinkers.add("qwen3:8b")  # listed as a model that thinks: the Thinking picker shows
        fake.script([tool_call("update_plan", {"plan": PLAN})], [rate(200), text(ANSWER)])
        data = Path(tmp) / "data"
        served = Served(data, {"TABLETALK_DATA": str(data), "AI_URL": fake.url, "AI_KEY": "", "AI_MODEL": "",
                               "OLLAMA_HOST": ""}).start()
        try:
            with served.store() as store:  # earlier conversations, for the sidebar
                agent = store.default_agent(store.owner())
                for title in EARLIER:
                    store.new_conversation(agent.id, title, person=store.owner())
            with served.client(timeout=20) as client:
                token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
                chat = client.post("/c", data={"_csrf_token": token, "text": QUESTION}).headers["location"]
                wait_for(lambda: 'data-running="0"' in client.get(chat).text and "A weekend in Lyon" in client.get(chat).text,
                         timeout=30)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                try:
                    context = served.context(browser, viewport=SIZE, color_scheme="light")
                    page = context.new_page()
                    page.goto(chat)
                    page.locator("html.js").wait_for(state="attached")
                    time.sleep(0.3)  # the page's stream opens; nothing moves after
                    page.screenshot(path=str(out))
                finally:
                    browser.close()
        finally:
            served.stop()
    return out


if __name__ == "__main__":
    print(made(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
