"""The MCP project's reference server, `@modelcontextprotocol/server-everything`, run on loopback.

Not a fake: the npm package itself (installed by `make npm-tools` into .cache/npm), started
with Debian's node, over Streamable HTTP (`/mcp`) or SSE (`/sse`):

    with Everything("streamableHttp") as server:
        ...point a plugin at server.url...

Its tools include `echo`, `get-sum`, `get-tiny-image`, `trigger-long-running-operation`
(progress), `get-resource-links`, `get-annotated-message` and `toggle-simulated-logging`,
whose answer depends on the session's state ("Started ..." then "Stopped ... for session X").
`tests/fakes/loopback.mjs` is preloaded so it listens on 127.0.0.1 only.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LOOPBACK = Path(__file__).resolve().parent / "loopback.mjs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Everything:
    """server-everything as a child process on a free loopback port; `restart()` starts a
    fresh process on the same port (every session it held is gone)."""

    def __init__(self, transport: str = "streamableHttp"):
        if transport not in ("streamableHttp", "sse"):
            raise ValueError(transport)
        self.transport = transport
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.log = b""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'mcp' if self.transport == 'streamableHttp' else 'sse'}"

    def start(self) -> "Everything":
        node = shutil.which("node")
        if not node or not PACKAGE.exists():
            raise RuntimeError("server-everything is not installed: run `make npm-tools` "
                               "(it installs the npm packages the tests use into .cache/npm)")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(self.port), "HOME": str(ROOT / ".cache")}
        self.process = subprocess.Popen([node, "--import", LOOPBACK.as_uri(), str(PACKAGE), self.transport],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server-everything exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("server-everything did not start listening within 30 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> "Everything":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
