"""The sign-in limiter: how long a pair (name, address or device) waits after failed
checks, and how many checks an address makes a minute."""
from __future__ import annotations

import math

# Wrong passwords are throttled per pair of name and source (the address, or a known
# device): a few are free, then each waits twice as long as the one before, up to a cap. So
# someone guessing at a name from one place slows only their own guesses there; the person
# elsewhere, or on a device they signed in from before, is never held up by them.
PAIR_FREE = 5              # failed checks of one pair before the delays begin
PAIR_MAX_DELAY = 900.0     # seconds, the longest wait between two checks of one pair
PAIR_MEMORY = 3600.0       # a pair's failures are forgotten after this long
# ... and from one address across names: higher, so that behind a reverse proxy (where
# everyone shares its address, unless TABLETALK_TRUSTED_PROXIES names it) one person
# guessing does not lock everyone else out. Known devices are not counted here.
ADDRESS_LIMIT = 50
SIGNIN_WINDOW = 60.0


class Throttled(Exception):
    """A password check that must wait `seconds` first."""

    def __init__(self, seconds: float):
        super().__init__(f"wait {seconds:.0f} s")
        self.seconds = max(1, math.ceil(seconds))

    @property
    def words(self) -> str:
        s = self.seconds
        return f"{s} second{'s' if s != 1 else ''}" if s < 90 else f"{math.ceil(s / 60)} minutes"
