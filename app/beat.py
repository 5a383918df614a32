"""The worker's clock: its periodic work on one grid, so the event loop wakes once for all of it.

A wake-up of a waiting process costs ~60-100 us of CPU on a busy 2-core machine (the
epoll wait returning, the switch back in, a turn of the loop), more than most timers'
own work: a feed poll every 25 ms and a write tick every 50 ms cost ~7 ms a second idle,
and a streamed answer woke its task for every token. So what runs often runs on the
beats of this grid (of the loop's clock, `time.monotonic`): model streams are read at
each beat (asyncnet.pace; half of them half a beat later, see PHASES), the runner writes
what they grew right after, the feed polls
for other processes' commits on half-beats and the runner's scans start on beats; due
together, they share one wake-up.
"""
from __future__ import annotations

import math

BEAT_SECONDS = 0.05
# Model streams read on one of two phases of the beat (asyncnet.AsyncioStream: every other
# connection half a beat later), and the runner writes after each phase's reads. On one
# phase, a hundred streams were read, parsed and written in one burst every 50 ms, and a
# token that came just after a beat waited for the whole burst of the next:
# benchmarks/runs.py at 100 x 20 tok/s, chunk -> committed p50 59-68 -> 36-40 ms, p99
# 100-202 -> 93-140 ms, for ~10% more CPU a token (the second wake-up a beat falls on the
# feed's own 25 ms polls). One answer streams on one phase: its cost is the same.
PHASES = 2
PHASE_SECONDS = BEAT_SECONDS / PHASES
# While a page in this process follows an answer, its model stream is read once a frame (a
# screen's ~60 Hz), not once a beat, and the feed hands what it read to those pages from
# memory (feed/dispatch.py, `Feed.grew`): a word is on the page within a frame of its
# arrival. Rows are still written on the beat. On the beat's grid: three frames a beat.
FRAME_SECONDS = BEAT_SECONDS / 3


def next_beat(now: float, every: float = BEAT_SECONDS) -> float:
    """The first moment after `now` on the grid of `every` seconds."""
    return (now // every + 1) * every


def beat_at_or_after(t: float, every: float = BEAT_SECONDS) -> float:
    """The first moment on the grid that is not before `t`."""
    return math.ceil(t / every) * every
