"""A tool result's content (MCP content blocks) as Tabletalk keeps it.

- Text parts as they are. Each part may be annotated for an audience: meant for the person
  only ("user": shown, not sent to the model) or the model only ("assistant": sent, not
  shown). Parts without an audience go to both.
- The first image or audio part the person may see is stored as a file, the call's `file`:
  the page shows an image inline and plays audio; an image meant for the model too is sent
  to it as an image part (history.py) when the model takes images. Other media parts are
  named in the text with their type and size, and why they are not shown: a call keeps its
  first only, a type Tabletalk does not show (an SVG), data that is not valid base64.
- Resource links are named in the text; http(s) ones become the call's source chips.
  Embedded text resources are included under their URI and type; binary ones are named.
- With no content, the structured content as JSON.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.tools import Result, Source

if TYPE_CHECKING:
    import mcp_types as types

log = logging.getLogger(__name__)

EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp",
              "audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/ogg": "ogg",
              "audio/flac": "flac", "audio/mp4": "m4a", "audio/webm": "webm"}


def _bytes(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _size(data: str) -> int:
    decoded = _bytes(data)
    return len(decoded) if decoded is not None else len(data) * 3 // 4


def _audience(block: Any) -> tuple[bool, bool]:
    """(the person sees it, the model is sent it)."""
    audience = getattr(getattr(block, "annotations", None), "audience", None)
    if not audience:
        return True, True
    return "user" in audience, "assistant" in audience


@dataclass
class _ByAudience:
    """A result's text as each of its audiences gets it: the model, and the page."""

    model: list[str] = field(default_factory=list)
    page: list[str] = field(default_factory=list)

    def add(self, text: str, shown: bool, sent: bool) -> None:
        if shown:
            self.page.append(text)
        if sent:
            self.model.append(text)


def convert(result: types.CallToolResult, tool: str, store: Any = None, chat: int = 0) -> Result:
    """The result as our Result; media stored through `store` (app.store.Store) when given,
    as the conversation's person's file."""
    import mcp_types as types

    parts = _ByAudience()
    sources: list[Source] = []
    file_id: int | None = None
    unsent = False
    for block in result.content:
        shown, sent = _audience(block)
        if isinstance(block, types.TextContent):
            parts.add(block.text, shown, sent)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            what = "image" if isinstance(block, types.ImageContent) else "audio"
            data = _bytes(block.data)
            kind = block.mime_type.split(";")[0].strip().lower()
            if data is None:
                note = f"[{what}: {block.mime_type}, which could not be read: its data is not valid base64]"
            elif kind not in EXTENSIONS:  # an SVG, say: not shown, not kept (it would be a .bin file)
                note = f"[{what}: {block.mime_type}, {len(data):,} bytes, of a type Tabletalk does not show]"
            elif file_id is not None and shown and store is not None:
                note = f"[{what}: {block.mime_type}, {len(data):,} bytes, not kept: a call keeps its first only]"
            else:
                note = f"[{what}: {block.mime_type}, {len(data):,} bytes]"
            if file_id is None and shown and data is not None and kind in EXTENSIONS and store is not None:
                file_id = _store(store, chat, tool, block.mime_type, data)
                if file_id is not None:
                    unsent = not sent
                    note = (f"[{what}: {block.mime_type}, {len(data):,} bytes, shown to the person"
                            f"{' and attached below' if sent and what == 'image' else ''}]")
            parts.add(note, shown, sent)
        elif isinstance(block, types.ResourceLink):
            parts.add(f"[link: {block.title or block.name} {block.uri}]", shown, sent)
            if str(block.uri).startswith(("http://", "https://")):
                sources.append(Source(str(block.uri), block.title or block.name))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):  # named, to tell it from the tool's own text
                parts.add(f"[resource: {resource.uri}, {resource.mime_type or 'text'}]\n{resource.text}", shown, sent)
            else:
                parts.add(f"[resource: {resource.uri}, {resource.mime_type or 'binary'}, "
                          f"{_size(resource.blob):,} bytes]", shown, sent)
        else:
            parts.add(f"[{getattr(block, 'type', 'unknown')} content]", shown, sent)
    if not result.content and result.structured_content is not None:
        parts.add(json.dumps(result.structured_content, ensure_ascii=False), True, True)
    model, page = "\n".join(parts.model), "\n".join(parts.page)
    if not model and page:
        model = "[The result was for the person only: it is shown to them and not sent to you.]"
    if not page and model:
        page = "[This result was for the model only.]"
    return Result(text=model, sources=tuple(sources), file=file_id, shown=page if page != model else "",
                  unsent=unsent)


def size(result: types.CallToolResult) -> int:
    """About how many bytes the result took on the wire: its texts, its media (base64), its
    embedded resources and its structured content."""
    total = 0
    for block in result.content:
        for part in (block, getattr(block, "resource", None)):
            for name in ("text", "data", "blob"):
                value = getattr(part, name, None)
                if isinstance(value, str):
                    total += len(value)
    if result.structured_content is not None:
        total += len(json.dumps(result.structured_content, ensure_ascii=False))
    return total


def _store(store: Any, chat: int, tool: str, mime: str, data: bytes) -> int | None:
    try:
        convo = store.conversation(chat) if chat else None
        name = f"{tool}.{EXTENSIONS.get(mime.split(';')[0].strip().lower(), 'bin')}"
        return store.add_file(name, data, convo.person if convo else None)
    except Exception:  # a file that cannot be stored leaves the text's summary
        log.exception("storing the %s a tool returned", mime)
        return None
