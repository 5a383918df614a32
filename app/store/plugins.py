"""Plugins (MCP servers an agent uses) and the MCP sessions conversations have with them."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from . import db as dbm
from ..tables import Plugin
from .rows import Base

PLUGIN_COLUMNS = {"name", "address", "header", "secret", "enabled", "status", "transport", "status_at", "listed",
                  "offers", "kind", "command", "args", "env", "instructions"}


def plugin_from_row(row: Any) -> Plugin:
    data = dict(row)
    return Plugin(agent=data["agent"], name=data["name"], address=data["address"], header=data["header"],
                  secret=data["secret"], enabled=bool(data["enabled"]), status=data["status"], id=data["id"],
                  transport=data.get("transport") or "", status_at=data.get("status_at"),
                  listed=data.get("listed") or "",
                  offers=tuple(str(o) for o in _json(data.get("offers"), [])),
                  kind=data.get("kind") or "http", command=data.get("command") or "",
                  args=tuple(str(a) for a in _json(data.get("args"), [])),
                  env=tuple((str(k), str(v)) for k, v in _json(data.get("env"), {}).items()),
                  instructions=data.get("instructions") or "")


def _json(raw: str | None, empty: Any) -> Any:
    try:
        value = json.loads(raw) if raw else empty
    except ValueError:
        return empty
    return value if isinstance(value, type(empty)) else empty


def _columns(values: dict[str, Any]) -> dict[str, Any]:
    """Plugin fields as the row keeps them (lists and mappings as JSON)."""
    out = dict(values)
    if "enabled" in out:
        out["enabled"] = int(out["enabled"])
    if "offers" in out:
        out["offers"] = json.dumps(list(out["offers"]))
    if "args" in out:
        out["args"] = json.dumps(list(out["args"]))
    if "env" in out:
        out["env"] = json.dumps(dict(out["env"]))
    return out


SECRET = "plugins.secret"  # what a plugin's secret is sealed as (sealed.py): never stored as typed


class Plugins(Base):
    def plugins(self, agent: int, enabled_only: bool = False) -> list[Plugin]:
        sql = "SELECT * FROM plugins WHERE agent = ?" + (" AND enabled = 1" if enabled_only else "") + " ORDER BY id"
        return [self._plugin(r) for r in self._all(sql, [agent])]

    def plugin_row(self, plugin_id: int) -> Plugin | None:
        row = self._one("SELECT * FROM plugins WHERE id = ?", [plugin_id])
        return self._plugin(row) if row else None

    def _plugin(self, row: Any) -> Plugin:
        found = plugin_from_row(row)
        return replace(found, secret=self.seal(SECRET).open(found.secret)) if found.secret else found

    def _sealed(self, values: dict[str, Any]) -> dict[str, Any]:
        # no secret asks for no key (a store no server has started yet makes none for nothing)
        return {**values, "secret": self.seal(SECRET).seal(values["secret"])} if values.get("secret") else values

    def add_plugin(self, p: Plugin) -> Plugin:
        t = dbm.now()
        values = _columns(self._sealed({"agent": p.agent, "name": p.name, "address": p.address, "header": p.header,
                                        "secret": p.secret, "enabled": p.enabled, "status": p.status,
                                        "kind": p.kind, "command": p.command, "args": p.args, "env": p.env}))
        with self.write() as db:
            values |= {"created": t, "updated": t, "rev": dbm.bump(db)}
            plugin_id = db.conn.execute(f"INSERT INTO plugins ({', '.join(values)}) VALUES ({', '.join('?' * len(values))}) "
                                        "RETURNING id", list(values.values())).fetchone()[0]
        return self.plugin_row(plugin_id)

    def update_plugin(self, plugin_id: int, **values: Any) -> None:
        self._update("plugins", plugin_id, PLUGIN_COLUMNS, _columns(self._sealed(values)))

    def seal_plugin_secrets(self) -> int:
        """Seal the plugin secrets a release before sealing stored as typed; how many."""
        return self.seal_typed("plugins", "id", ("secret",), SECRET)

    def delete_plugin(self, plugin_id: int) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM plugins WHERE id = ?", [plugin_id])

    # --- MCP sessions (no page shows them: no rev) -------------------------------------

    def mcp_session(self, chat: int, plugin: int, fingerprint: str) -> tuple[str, str] | None:
        """The session id and the server's `initialize` answer (JSON) a conversation has with
        a plugin reached the same way (`fingerprint`), if one was kept."""
        row = self._one("SELECT session_id, initialized FROM mcp_sessions WHERE chat = ? AND plugin = ? "
                       "AND fingerprint = ?", [chat, plugin, fingerprint])
        return (row[0], row[1]) if row else None

    def keep_mcp_session(self, chat: int, plugin: int, fingerprint: str, session_id: str, initialized: str) -> None:
        with self.write() as db:
            db.conn.execute(  # the conversation or plugin may be gone meanwhile: then nothing is kept
                "INSERT INTO mcp_sessions (chat, plugin, fingerprint, session_id, initialized, used) "
                "SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM conversations WHERE id = ?) "
                "AND EXISTS (SELECT 1 FROM plugins WHERE id = ?) "
                "ON CONFLICT (chat, plugin) DO UPDATE SET fingerprint = excluded.fingerprint, "
                "session_id = excluded.session_id, initialized = excluded.initialized, used = excluded.used",
                [chat, plugin, fingerprint, session_id, initialized, dbm.now(), chat, plugin])

    def touch_mcp_session(self, chat: int, plugin: int, session_id: str) -> None:
        with self.write() as db:
            db.conn.execute("UPDATE mcp_sessions SET used = ? WHERE chat = ? AND plugin = ? AND session_id = ?",
                            [dbm.now(), chat, plugin, session_id])

    def mcp_session_used(self, chat: int, plugin: int) -> float | None:
        """When the kept session was last used (by any worker), or None when none is kept."""
        row = self._one("SELECT used FROM mcp_sessions WHERE chat = ? AND plugin = ?", [chat, plugin])
        return row[0] if row else None

    def forget_mcp_sessions(self, plugin: int) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM mcp_sessions WHERE plugin = ?", [plugin])

    def forget_mcp_session(self, chat: int, plugin: int, session_id: str | None = None) -> None:
        """Forget the kept session (only if it is still `session_id`, when given)."""
        with self.write() as db:
            if session_id is None:
                db.conn.execute("DELETE FROM mcp_sessions WHERE chat = ? AND plugin = ?", [chat, plugin])
            else:
                db.conn.execute("DELETE FROM mcp_sessions WHERE chat = ? AND plugin = ? AND session_id = ?",
                                [chat, plugin, session_id])

