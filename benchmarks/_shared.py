"""What the benchmark scripts share: a free port, percentiles, CPU, and the printed table.

Not a benchmark itself (`make bench` skips files starting with "_")."""
from __future__ import annotations

import resource
import socket
import sys
from dataclasses import dataclass, field

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Table:
    """Rows of (metric, value, goal), printed aligned at the end; with `echo`, each row also
    goes to stderr as it is measured (a long run shows its progress)."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)
    echo: bool = False

    def add(self, metric: str, value: str, goal: str = "") -> None:
        self.rows.append((metric, value, goal or "-"))
        if self.echo:
            print(f"  .. {metric}: {value}", file=sys.stderr, flush=True)

    def print(self) -> None:
        head = ("metric", "value", "goal")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(3)]
        line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        print(line(head))
        print("-+-".join("-" * w for w in widths))
        for r in self.rows:
            print(line(r))
