"""Plugins and the model's window: a result too long for the request is sent shortened and
the run goes on; tools that alone fill the request are named, with what to do."""
from __future__ import annotations

from tests.conftest import csrf, idle, soup, start_chat
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import tool_call
from tests.test_agents_tools import agent_url


def test_a_result_too_long_for_the_request_is_shortened_and_the_run_goes_on(make_client, fake):
    """other-model has a 4,096-token window (3,072 a request); 20,000 lines are ~150 KB."""
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": mcp.url})
        fake.script([tool_call("127_0_0_1_lines", {"count": 20000})], "Those were many lines.")
        chat = start_chat(client, "count to twenty thousand", model="other-model")
        page = idle(client, chat)
        assert page.select_one("article.call .state").text == "done"
        output = page.select_one("article.call pre.output")
        assert output.text.startswith("line 1\n") and "more characters: the whole output" in output.text
        whole = client.get(output.select_one("a.whole")["href"])  # the page has its head; the whole downloads
        assert whole.text.startswith("line 1\n") and whole.text.endswith("line 20000\n")
        assert whole.headers["content-disposition"].startswith("attachment")
        assert page.select("article.text")[-1].get_text(strip=True) == "Those were many lines."
        assert not page.select("article.error")
        sent = fake.streamed[1]["messages"][-1]["content"]
        assert sent.startswith("line 1\n") and sent.endswith("line 20000\n"), "head and tail"
        assert "characters of this output" in sent and "were left out here" in sent
        assert len(sent) < 12_000


def test_tools_that_fill_the_request_are_named_with_what_to_do(make_client, fake):
    """With 5% of a 4,096-token window for a request, the tools alone do not fit."""
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1", TABLETALK_CONTEXT_SHARE="0.05") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": mcp.url})
        chat = start_chat(client, "hello", model="other-model")
        error = idle(client, chat).select_one("article.error").get_text(" ", strip=True)
        assert "The tools this agent offers take about" in error
        assert "127_0_0_1’s 10 tools" in error and "the built-in" in error
        assert "Untick the tools you do not need" in error and "larger window" in error
        assert "Your message is too long" not in error and "Shorten" not in error
        assert not fake.streamed, "nothing was sent"
