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


def listening(process: subprocess.Popen, port: int, what: str, seconds: float = 30) -> None:
    """Wait until the child `process` listens on `port`; its stderr's tail if it exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited: {process.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    end(process)
    raise RuntimeError(f"{what} did not start listening within {seconds:.0f} s")


def end(process: subprocess.Popen | None, grace: float = 5) -> None:
    """Stop a child server: terminate, then kill after `grace` s; its stderr closed."""
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    if process and process.stderr:
        process.stderr.close()


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
        try:
            listening(self.process, self.port, "server-everything")
        except RuntimeError:
            self.process = None
            raise
        return self

    def stop(self) -> None:
        end(self.process)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> "Everything":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
