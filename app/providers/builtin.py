"""The built-in model in the model list, as `local:SmolLM2-135M-Instruct`, or the GGUF the owner
brought that its runtime serves instead, as `local:NAME` (app/providers asks)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx2

from .catalog import openai_catalog
from .ids import GROUP_LOCAL, Choice
from ..config import LOCAL
from ..tables import NO_IMAGES
from ..builtin import NAME, WINDOW, installed, url_of

NOTE = "built-in, tiny: for trying Tabletalk"
BROUGHT = "on this computer: a model you brought"
DOWN = Choice("!builtin", "The built-in model", GROUP_LOCAL, up=False)


async def listing(http: httpx2.AsyncClient, data: Path, servers: dict | None = None) -> list[Choice]:
    """Its row in the picker: nothing when it is not installed, one that says so while its
    server is not up (starting, restarting), else the model, text only, with its window."""
    if not installed(data):
        return []
    url = url_of(data)
    if not url:
        return [replace(DOWN, note="starting")]
    try:
        # `servers`: what it says about itself is kept (one request at a time: providers/servers.py)
        found = await openai_catalog(http, url, "", GROUP_LOCAL, f"{LOCAL}:", servers=servers)
    except httpx2.HTTPError:
        return [replace(DOWN, note="starting")]
    # SmolLM2: started with a window of WINDOW, and it reads no images (its chat template fails
    # on them); a brought model: the window its server says (/props), images as its list says
    return [replace(c, note=NOTE, window=WINDOW, tags=(*c.tags, NO_IMAGES)) if c.name == NAME
            else replace(c, note=BROUGHT) for c in found]
