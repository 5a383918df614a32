"""A plugin connected with OAuth (app/plugins/oauth.py): its registered client, its tokens and a
flow under way, one row per plugin (m023). The tokens and the client (which may hold a client
secret) are stored sealed with the app's key (app/store/sealed.py), as a plugin's secret is:
whoever reads the table learns nothing they could sign in to the plugin's server with."""
from __future__ import annotations

import json
from typing import Any

from . import db as dbm
from .rows import Base
from .sealed import is_sealed

AUTH_COLUMNS = ("client", "tokens", "pending", "flow")
SEALED_COLUMNS = ("client", "tokens")
TOKENS = "plugins.oauth"  # what they are sealed as (sealed.py)


class PluginAuth(Base):
    def plugin_auth(self, plugin: int) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM plugin_auth WHERE plugin = ?", [plugin])
        if not row:
            return None
        # a value stored as typed (before sealing) opens as it is: the key is read only for a sealed one
        return {k: self.seal(TOKENS).open(v) if k in SEALED_COLUMNS and is_sealed(v or "") else v
                for k, v in dict(row).items()}

    def set_plugin_auth(self, plugin: int, **values: str) -> None:
        """Write some of the row's columns (the row is made when there is none)."""
        bad = set(values) - set(AUTH_COLUMNS)
        if bad:
            raise ValueError(f"not plugin_auth columns: {sorted(bad)}")
        values = {k: self.seal(TOKENS).seal(v) if k in SEALED_COLUMNS and v else v for k, v in values.items()}
        with self.write() as db:
            db.conn.execute("INSERT INTO plugin_auth (plugin, updated) VALUES (?, ?) ON CONFLICT (plugin) DO NOTHING",
                            [plugin, dbm.now()])
            sets = ", ".join(f"{k} = ?" for k in values)
            db.conn.execute(f"UPDATE plugin_auth SET {sets}, updated = ? WHERE plugin = ?",
                            [*values.values(), dbm.now(), plugin])

    def forget_plugin_auth(self, plugin: int) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM plugin_auth WHERE plugin = ?", [plugin])

    def auth_flow(self, state: str) -> tuple[int, dict[str, Any]] | None:
        """The plugin whose flow under way has this `state`, and the flow."""
        row = self._one("SELECT plugin, pending FROM plugin_auth WHERE flow = ? AND flow != ''", [state])
        return (row["plugin"], json.loads(row["pending"])) if row else None

    def plugins_with_auth(self, plugins: list[int]) -> set[int]:
        """Which of these plugins are connected with OAuth (hold tokens)."""
        if not plugins:
            return set()
        marks = ",".join("?" * len(plugins))
        return {r[0] for r in self._all(f"SELECT plugin FROM plugin_auth WHERE plugin IN ({marks}) "
                                       "AND tokens != ''", plugins)}

    def seal_plugin_tokens(self) -> int:
        """Seal the OAuth tokens and clients a release before sealing stored as typed; how many rows."""
        return self.seal_typed("plugin_auth", "plugin", SEALED_COLUMNS, TOKENS)
