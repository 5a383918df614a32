"""Secrets people give Tabletalk to send elsewhere (a plugin's secret; a model server's key
next), stored sealed with the app's key rather than as typed.

The key is derived (HKDF-SHA256) from the app's secret key, the `secret.key` row of `secrets`
that every server of the database reads (app/store/secrets.py), one key per `purpose`. A value
is sealed with AES-256-GCM under a random 96-bit nonce, the purpose bound in as associated
data (a value sealed for one column does not open as another's), and kept as
`sealed:v1:` + URL-safe base64 of nonce and ciphertext. What reads the rows of one table
(a page that lists them, a log, an export of the table) learns nothing of the secret; whoever
has the whole database has the key beside it, as every server must.

A value without the prefix is one stored before sealing: it opens as it is, and the store
seals those rows when a server starts (`Store.seal_plugin_secrets`).
"""
from __future__ import annotations

import base64
import logging
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

log = logging.getLogger(__name__)

PREFIX = "sealed:v1:"
NONCE = 12


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)


class Seal:
    """Seals and opens the values of one `purpose` (e.g. "plugins.secret") with a key derived
    from the app's key."""

    def __init__(self, app_key: bytes, purpose: str):
        self.purpose = purpose.encode()
        self._aead = AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                                 info=b"tabletalk sealed secret: " + self.purpose).derive(app_key))

    def seal(self, plain: str) -> str:
        """`plain` sealed ('' stays '': no secret is no secret)."""
        if not plain:
            return ""
        nonce = os.urandom(NONCE)
        sealed = self._aead.encrypt(nonce, plain.encode("utf-8", "surrogatepass"), self.purpose)
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, stored: str) -> str:
        """The secret a stored value holds: a sealed one opened, one stored before sealing as it
        is. One sealed with another key, or damaged, opens as '' (the plugin then goes without
        its secret, and its server says so), logged without the value."""
        if not is_sealed(stored):
            return stored
        try:
            raw = base64.urlsafe_b64decode(stored[len(PREFIX):].encode("ascii"))
            return self._aead.decrypt(raw[:NONCE], raw[NONCE:], self.purpose).decode("utf-8", "surrogatepass")
        except (InvalidTag, ValueError, UnicodeError):
            log.warning("a stored %s could not be opened with this database's key (sealed with another, or "
                        "damaged): it is used as empty", self.purpose.decode())
            return ""
