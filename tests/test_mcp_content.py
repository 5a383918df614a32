"""Tool results' content blocks as Tabletalk keeps them (app/plugins/content.py)."""
from __future__ import annotations

import base64

import mcp_types as types

from app import files as filestore
from app.plugins.content import convert

WAV = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(24) + b"data" + bytes(4)


def test_audio_is_stored_as_the_calls_file(store):
    chat = store.new_conversation(None).id
    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="a beep"),
        types.AudioContent(type="audio", data=base64.b64encode(WAV).decode(), mime_type="audio/wav"),
    ])
    done = convert(result, "beep", store, chat)
    row = store.file(done.file)
    assert row["type"] == "audio/wav" and row["name"] == "beep.wav" and row["size"] == len(WAV)
    assert done.text == f"a beep\n[audio: audio/wav, {len(WAV):,} bytes, shown to the person]"
    assert not done.unsent and done.shown == ""


def test_without_a_store_media_are_named_only():
    result = types.CallToolResult(content=[
        types.ImageContent(type="image", data=base64.b64encode(b"\x89PNG\r\n\x1a\n").decode(), mime_type="image/png"),
    ])
    assert convert(result, "pic").text == "[image: image/png, 8 bytes]"


def test_resource_links_become_sources_when_they_are_web_pages():
    result = types.CallToolResult(content=[
        types.ResourceLink(type="resource_link", uri="https://example.org/a", name="A page"),
        types.ResourceLink(type="resource_link", uri="demo://resource/1", name="Demo"),
    ])
    done = convert(result, "links")
    assert [s.url for s in done.sources] == ["https://example.org/a"]
    assert "[link: Demo demo://resource/1]" in done.text


def test_audio_is_sniffed():
    assert filestore.sniff(WAV) == "audio/wav"
    assert filestore.sniff(b"ID3\x04" + bytes(10)) == "audio/mpeg"
    assert filestore.sniff(b"OggS" + bytes(10)) == "audio/ogg"


PNG = b"\x89PNG\r\n\x1a\n" + bytes(8)


def test_what_is_not_shown_is_said_so(store):
    chat = store.new_conversation(None).id
    image = lambda data, mime="image/png": types.ImageContent(type="image", data=data, mime_type=mime)  # noqa: E731
    result = types.CallToolResult(content=[
        image(base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode(), "image/svg+xml"),
        image("not base64 at all!"),
        image(base64.b64encode(PNG).decode()),
        image(base64.b64encode(PNG).decode()),
    ])
    done = convert(result, "pics", store, chat)
    assert done.text.splitlines() == [
        "[image: image/svg+xml, 41 bytes, of a type Tabletalk does not show]",
        "[image: image/png, which could not be read: its data is not valid base64]",
        "[image: image/png, 16 bytes, shown to the person and attached below]",
        "[image: image/png, 16 bytes, not kept: a call keeps its first only]",
    ]
    assert store.file(done.file)["name"] == "pics.png", "the first image it can show is the call's file"


def test_an_embedded_text_resource_is_named_by_its_uri():
    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="Here it is:"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///notes/a.txt", mime_type="text/plain", text="the file's words")),
    ])
    assert convert(result, "read").text == "Here it is:\n[resource: file:///notes/a.txt, text/plain]\nthe file's words"
