"""The public-address guard under every request a person or a model can aim.

Page fetches and MCP plugin addresses come from people and models, so a request must not
reach this machine, its network or a cloud metadata service. The guard:

- parses the host the way OS resolvers do (`parse_host`: `2130706433`, `0x7f.1`, `0177.0.0.1`,
  `[::ffff:127.0.0.1]`, zone ids, trailing dots, IDNA), and resolves names with an
  injectable resolver;
- refuses unless every address is global unicast (`is_public`);
- connects to the very address it checked: the check lives in an httpcore2 network backend,
  whose `connect_tcp(host, port)` is where httpcore2 opens every connection, so a name is
  resolved once per connection and the socket goes to an address from that answer. There is
  no second lookup for a rebinding DNS server to answer differently. The Host header and TLS
  (SNI, certificate check) keep the name: httpcore2 takes them from the URL, not the socket.
- checks every redirect hop again, because each new origin opens a new connection through the
  same backend; `fetch` follows redirects itself to count hops and say which one was refused.

`allow_private=True` (CHAT_PRIVATE_PLUGINS=1, for plugins only, never for page fetches)
lifts the address check and keeps everything else.

Three parts, one job each: addresses.py (which addresses are public, what a host spells:
no network), guard.py (the check in front of every connection: Guard, the backend, the
transport, `guarded_client`) and fetching.py (`fetch`: a body with size and time limits,
redirects counted); and under the model streams, which the guard wraps, sockets.py (asyncio's
own sockets). Import from here: `from app.netguard import Guard, Refused, ...`.
"""

from __future__ import annotations

from .addresses import Refused, is_public, parse_host, system_resolve, why_not_public
from .fetching import Fetched, fetch
from .guard import Guard, GuardedBackend, GuardedTransport, guarded_client

__all__ = [
    "Fetched",
    "Guard",
    "GuardedBackend",
    "GuardedTransport",
    "Refused",
    "fetch",
    "guarded_client",
    "is_public",
    "parse_host",
    "system_resolve",
    "why_not_public",
]
