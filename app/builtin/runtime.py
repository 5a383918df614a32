"""The runtimes that serve the built-in model's GGUF over an OpenAI-compatible HTTP API, which
one this computer gets, and how each is tried and started.

    xllamacpp          llama.cpp's own C++ server (the one `llama-server` runs) in a prebuilt
                       wheel on PyPI: installed in seconds, no compiler. It has no command of its
                       own: `SERVE` starts it from a few lines of Python in the model's venv.
    llama-cpp-python   its Python server over llama.cpp compiled on this computer, portably
                       (minutes): the fallback where no xllamacpp wheel fits the platform.

Both listen on loopback only; the supervisor (app/serve/supervise.py) runs one and keeps it.
"""
from __future__ import annotations

import ctypes.util
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import NAME, WINDOW, Paths

XLLAMACPP_VERSION = "2026.10.11549"  # xllamacpp: llama.cpp's server in a wheel (cp310-abi3)
LLAMA_VERSION = "0.3.36"  # llama-cpp-python, with its [server] extra: the source build's
PORTABLE = "-DGGML_NATIVE=OFF"  # the source build's CMAKE_ARGS (docs/local-model.md says why)
GLIBC_AT_LEAST = (2, 17)  # the xllamacpp wheels for Linux are manylinux2014
MACOS_AT_LEAST = (13, 0)


@dataclass(frozen=True)
class Runtime:
    name: str  # as a person reads it
    requirement: str  # what pip installs
    package: str  # its folder in site-packages: how an installed one is recognised
    wheel: str  # the start of its wheel's file name (the pinned version's)
    built: bool  # compiled on this computer (minutes) rather than taken from a wheel

    def wheel_in(self, *folders: Path | None) -> Path | None:
        """A wheel of this runtime's pinned version in one of `folders` (given, or built here before)."""
        for folder in folders:
            if folder is not None and (found := sorted(folder.glob(f"{self.wheel}-*.whl"))):
                return found[-1]
        return None


XLLAMACPP = Runtime("xllamacpp", f"xllamacpp=={XLLAMACPP_VERSION}", "xllamacpp", f"xllamacpp-{XLLAMACPP_VERSION}",
                    built=False)
LLAMA_CPP_PYTHON = Runtime("llama-cpp-python", f"llama-cpp-python[server]=={LLAMA_VERSION}", "llama_cpp",
                           f"llama_cpp_python-{LLAMA_VERSION}", built=True)
RUNTIMES = (XLLAMACPP, LLAMA_CPP_PYTHON)


def no_wheel_fits(system: str = "", machine: str = "", libc: tuple[str, str] | None = None, macos: str = "") -> str:
    """Why no xllamacpp wheel of the pinned version fits this computer (or the one described),
    or '' when one does. The version has wheels for Linux with glibc 2.17 or newer
    (manylinux2014) on x86-64 and arm64, and for macOS 13 or newer on both; none for musl libc
    (Alpine) or other systems."""
    system = system or sys.platform
    machine = machine or platform.machine()
    libc = libc if libc is not None else platform.libc_ver()
    macos = macos or platform.mac_ver()[0]
    arm = machine.lower() in ("aarch64", "arm64")
    x86 = machine.lower() in ("x86_64", "amd64")
    if system.startswith("linux"):
        kind, version = libc
        if kind != "glibc":
            return f"no prebuilt llama.cpp for a Linux without glibc ({kind or 'another C library'})"
        if _version(version) < GLIBC_AT_LEAST:
            return f"no prebuilt llama.cpp for glibc {version} (it needs 2.17 or newer)"
        return "" if arm or x86 else f"no prebuilt llama.cpp for {machine} Linux"
    if system == "darwin":
        if _version(macos) < MACOS_AT_LEAST:
            return f"no prebuilt llama.cpp for macOS {macos} (it needs 13 or newer)"
        return "" if arm or x86 else f"no prebuilt llama.cpp for {machine} macOS"
    return f"no prebuilt llama.cpp for {system}"


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(".")[:2])
    except ValueError:
        return ()


def chosen() -> Runtime:
    """The runtime this computer gets: the wheel's, else the source build."""
    return LLAMA_CPP_PYTHON if no_wheel_fits() else XLLAMACPP


def missing_libraries(runtime: Runtime, system: str = "",
                      find: Callable[[str], str | None] = ctypes.util.find_library) -> str:
    """A system library the runtime needs that this computer lacks, in words, else ''. The
    Linux wheels of xllamacpp link GNU's OpenMP (libgomp.so.1) without carrying it: Debian's
    package libgomp1 (`find` is ctypes' find_library, which asks `ldconfig -p`)."""
    if runtime is XLLAMACPP and (system or sys.platform).startswith("linux") and find("gomp") is None:
        return ("llama.cpp's server needs GNU's OpenMP library (libgomp.so.1), which this computer lacks: on "
                "Debian or Ubuntu, apt-get install libgomp1 (as root). Then choose it again.")
    return ""


def installed(paths: Paths) -> Runtime | None:
    """The runtime installed in the model's venv, if any."""
    for runtime in RUNTIMES:
        if any(paths.venv.glob(f"lib/python*/site-packages/{runtime.package}/__init__.py")):
            return runtime
    return None


# xllamacpp's server, started from the venv's Python: it serves from threads of its own for as
# long as this process lives (a SIGTERM ends it). One request at a time, each with the whole
# window (Tabletalk queues the rest: providers/servers.py); no web page of any origin may read
# its answers (llama.cpp's default lets every origin); no web UI. With "embeddings", it also
# answers /v1/embeddings (mean-pooled; a text of up to the window, which must fit one batch).
SERVE = """\
import signal, sys
import xllamacpp
gguf, name, port, window, threads, embeddings = sys.argv[1:7]
params = xllamacpp.CommonParams()
params.model.path = gguf
params.model_alias = {name}
params.hostnames = ["127.0.0.1"]
params.port = int(port)
params.n_ctx = int(window)
params.n_parallel = 1
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = int(threads)
params.cors_origins = ""
params.ui = False
if embeddings == "embeddings":
    params.embedding = True
    params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    params.n_batch = params.n_ubatch = int(window)
server = xllamacpp.Server(params)
print("listening on", server.listening_address, flush=True)
signal.pause()
"""

# Two tokens from the model, in the runtime as it will serve: a build that traps on this CPU,
# or a library it cannot load, fails here with its words, not at the person's first message.
TRY = {
    XLLAMACPP: """\
import sys, xllamacpp
params = xllamacpp.CommonParams()
params.model.path = sys.argv[1]
params.n_ctx = 256
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1
params.hostnames, params.port, params.ui = ["127.0.0.1"], 0, False
server = xllamacpp.Server(params)
print(repr(server.handle_completions({"prompt": "Hello", "max_tokens": 2})["choices"][0]["text"]))
""",
    LLAMA_CPP_PYTHON: """\
import sys, llama_cpp
model = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, verbose=False)
print(repr(model.create_completion("Hello", max_tokens=2)["choices"][0]["text"]))
""",
}


def server_argv(runtime: Runtime, python: Path, gguf: Path, port: int, threads: int, name: str = NAME,
                window: int = WINDOW, embeddings: bool = False) -> list[str]:
    """The command that serves `gguf` as `name` on 127.0.0.1:`port` with a window of `window`
    (SmolLM2's, unless a brought model's; `embeddings`: xllamacpp's answers /v1/embeddings
    too). llama-cpp-python's requests wait for each other (interrupt_requests off: by default
    a second request ended the running one)."""
    if runtime is XLLAMACPP:
        return [str(python), "-c", SERVE, str(gguf), name, str(port), str(window), str(threads),
                "embeddings" if embeddings else "chat"]
    return [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", name,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(window), "--interrupt_requests", "False",
            "--n_threads", str(threads), "--n_threads_batch", str(threads)]


def try_argv(runtime: Runtime, python: Path, gguf: Path) -> list[str]:
    return [str(python), "-c", TRY[runtime], str(gguf)]
