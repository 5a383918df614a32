"""Playwright MCP (npm `@playwright/mcp`, installed by `make npm-tools` into .cache/npm) on a
free loopback port, driving Debian's Chromium headless, and a page of ours on loopback for it
to open. Not a fake: the package itself, run by Debian's node.

    with PlaywrightMCP(tmp_path) as server, LoopbackPage("<h1>Hi</h1>") as page:
        ...point a plugin at server.url ("/mcp", Streamable HTTP) or server.sse_url ("/sse")...
"""
from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
from pathlib import Path

from tests.fakes.everything import ROOT, end, free_port, listening

PACKAGE = ROOT / ".cache/npm/node_modules/@playwright/mcp/cli.js"
CHROMIUM = "/usr/bin/chromium"


def installed() -> bool:
    return PACKAGE.exists() and bool(shutil.which("node")) and Path(CHROMIUM).exists()


class PlaywrightMCP:
    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse"

    def start(self) -> "PlaywrightMCP":
        if not installed():
            raise RuntimeError("@playwright/mcp is not installed: run `make npm-tools` (and `make browser`)")
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [shutil.which("node"), str(PACKAGE), "--headless", "--no-sandbox", "--isolated",
                   "--browser", "chromium", "--executable-path", CHROMIUM,
                   "--host", "127.0.0.1", "--port", str(self.port), "--allowed-hosts", f"127.0.0.1:{self.port}",
                   "--output-dir", str(self.folder)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.folder)}
        self.process = subprocess.Popen(command, env=env, cwd=self.folder, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        try:
            listening(self.process, self.port, "Playwright MCP")
        except RuntimeError:
            self.process = None
            raise
        return self

    def stop(self) -> None:
        end(self.process, grace=10)
        self.process = None

    def __enter__(self) -> "PlaywrightMCP":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LoopbackPage:
    """One HTML page served on 127.0.0.1 (every path answers it)."""

    def __init__(self, html: str):
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"

    def __enter__(self) -> "LoopbackPage":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
