"""A slow model's words reach the page as they come: a model sending a word every 100 ms
(a local model at ~10 tokens a second) updates the page at nearly every word, not in lumps
of a reveal step (issue: 'Slow models stream in lumps', 510-551 ms between updates)."""
import pytest

from tests.conftest import Served
from tests.fakes.openai_server import rate, text

pytestmark = pytest.mark.browser

WORDS = 48
# plain prose, a word a chunk (the fake's default), as a small model streams it
ANSWER = " ".join(f"word{n}" if n % 7 else f"Then, word{n}" for n in range(WORDS)) + "."

# Every change of the answer's text, as the page sees it: (when, how many words it shows)
WATCH = """() => {
  window.__grew = [];
  let last = -1;
  const seen = () => {
    const body = document.querySelector('article.text .body');
    const words = body ? body.textContent.split(/\\s+/).filter(Boolean).length : 0;
    if (words !== last) { last = words; window.__grew.push([performance.now(), words]); }
  };
  new MutationObserver(seen).observe(document.getElementById('items'),
                                     {subtree: true, childList: true, characterData: true});
  seen();
}"""


@pytest.fixture
def page(browser, served: Served):
    with served.watched_page(browser) as p:
        yield p


def test_a_model_sending_a_word_every_100_ms_updates_the_page_at_nearly_every_word(page, served, fake):
    fake.script([rate(10), text(ANSWER)])
    page.goto(served.empty_chat())  # open before the message: the page follows the whole answer
    page.evaluate(WATCH)
    page.locator("#composer textarea").fill("Talk slowly")
    page.locator("#composer textarea").press("Enter")
    page.locator("article.text .state.done").wait_for(state="attached", timeout=30_000)
    grew = page.evaluate("window.__grew")
    # the words shown while the answer grew (the last message, its end, is not a beat)
    growing = [(t, n) for t, n in grew if 0 < n < WORDS]
    assert growing, grew
    shown = growing[-1][1] - growing[0][1]
    updates = len(growing) - 1
    # each 100 ms beat brings one word: at least 8 of 10 of them are an update of their own
    assert shown >= WORDS // 2, f"the page saw only {shown} of {WORDS} words grow: {grew}"
    assert updates >= 0.8 * shown, (
        f"{updates} updates for {shown} words: the page showed them in lumps "
        f"({[n for _, n in growing]})")
