"""Models, agents (with their memories) and the shared skills; plugins are in plugins.py."""
from __future__ import annotations

from typing import Any

from . import db as dbm
from ..providers.ids import Choice
from ..providers.limits import Limits
from ..tables import Assistant, Skill
from .rows import Base
from .people import reading


class Agents(Base):
    # --- models ---------------------------------------------------------------------

    @staticmethod
    def _choice(r: Any) -> Choice:
        return Choice(id=r["id"], name=r["name"], group=r["group"], note=r["note"], window=r["window"],
                      tags=tuple(t for t in r["tags"].split(",") if t), up=bool(r["up"]))

    def choices(self) -> list[Choice]:
        """The models listed at the last refresh, in the picker's order, with the providers that were down."""
        return [self._choice(r) for r in self._all("SELECT * FROM choices ORDER BY place")]

    def choice(self, model: str) -> Choice | None:
        """The model a message may name as `model`: listed, and its server answered."""
        r = self._one("SELECT * FROM choices WHERE id = ? AND up = 1", [model])
        return self._choice(r) if r else None

    def model_window(self, model: str) -> int:
        """The model's context window as its list gave it (0: not listed, or not said)."""
        r = self._one('SELECT "window" FROM choices WHERE id = ?', [model])
        return (r[0] if r else 0) or 0

    def replace_choices(self, choices: list[Choice]) -> None:
        """The whole list at once (`place` keeps its order; a model listed twice is where and as
        it was last listed): readers see the old list or the new."""
        with self.write() as db:
            db.conn.execute("DELETE FROM choices")
            db.conn.executemany(
                'INSERT INTO choices (id, name, "group", note, "window", tags, up, place) VALUES (?, ?, ?, ?, ?, ?, ?, ?) '
                'ON CONFLICT (id) DO UPDATE SET name = excluded.name, "group" = excluded."group", note = excluded.note, '
                '"window" = excluded."window", tags = excluded.tags, up = excluded.up, place = excluded.place',
                [[c.id, c.name, c.group, c.note, c.window, ",".join(c.tags), int(c.up), n] for n, c in enumerate(choices)])

    def limits(self, model: str) -> Limits:
        """What `model`'s server was found not to take (the defaults until one refused)."""
        r = self._one("SELECT * FROM model_limits WHERE model = ?", [model])
        return Limits(window=r["window"], images=bool(r["images"]), tools=bool(r["tools"]),
                      reasoning=bool(r["reasoning"])) if r else Limits()

    def set_limits(self, model: str, limits: Limits) -> None:
        with self.write() as db:
            db.conn.execute(
                """INSERT INTO model_limits (model, "window", images, tools, reasoning, updated) VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (model) DO UPDATE SET "window" = excluded."window", images = excluded.images,
                   tools = excluded.tools, reasoning = excluded.reasoning, updated = excluded.updated""",
                [model, limits.window, int(limits.images), int(limits.tools), int(limits.reasoning), dbm.now()])

    def saw_thought(self, model: str) -> None:
        """`model` was seen thinking (an answer with reasoning): its Thinking picker is offered."""
        with self.write() as db:
            db.conn.execute("INSERT INTO model_limits (model, updated, thought) VALUES (?, ?, 1) "
                            "ON CONFLICT (model) DO UPDATE SET thought = 1", [model, dbm.now()])

    def seen_thinking(self) -> set[str]:
        """The models seen thinking (saw_thought)."""
        return {r[0] for r in self._all("SELECT model FROM model_limits WHERE thought = 1")}

    # --- agents ---------------------------------------------------------------------

    def agent(self, agent_id: int) -> Assistant | None:
        row = self._one("SELECT * FROM assistants WHERE id = ?", [agent_id])
        return Assistant.from_row(row) if row else None

    def agents(self, person: int | None) -> list[Assistant]:
        whose, params = self._is("person", person)
        return [Assistant.from_row(r) for r in self._all(f"SELECT * FROM assistants WHERE {whose} ORDER BY id", params)]

    def add_agent(self, a: Assistant) -> Assistant:
        t = dbm.now()
        with self.write() as db:
            cur = db.conn.execute(
                "INSERT INTO assistants (name, instructions, model, tools, approve, created, updated, rev, person) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [a.name, a.instructions, a.model, a.tools, a.approve, t, t, dbm.bump(db), a.person])
            agent_id = cur.fetchone()[0]
        return self.agent(agent_id)

    def delete_agent(self, agent_id: int) -> None:
        """Its conversations stay readable (their agent becomes none); its plugins and memories go."""
        with self.write() as db:
            db.conn.execute("DELETE FROM assistants WHERE id = ?", [agent_id])

    def memories(self, agent: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("SELECT * FROM memories WHERE agent = ? ORDER BY id", [agent])]

    def add_memory(self, agent: int, text: str, *, outside: bool = False, chat: int | None = None) -> int:
        with self.write() as db:
            return db.conn.execute(  # the conversation only while it exists (it may be gone meanwhile)
                "INSERT INTO memories (agent, text, created, outside, chat) "
                "VALUES (?, ?, ?, ?, (SELECT id FROM conversations WHERE id = ?)) RETURNING id",
                [agent, text, dbm.now(), int(outside), chat]).fetchone()[0]

    def outside_text(self, chat: int, inside: tuple[str, ...]) -> bool:
        """Whether text from outside reached this conversation (docs/security.md): a call's
        output, but the `inside` tools' (they only read and write this app's rows); a message
        a plugin wrote (a prompt: `outside`) or one with attachments (a plugin's resources and
        the person's own files alike); a plugin's question or sampling request."""
        marks = ",".join("?" * len(inside)) or "''"
        return self._one(f"SELECT 1 FROM items WHERE chat = ? AND ("
                        f"(kind = 'call' AND output != '' AND name NOT IN ({marks})) "
                        "OR (kind = 'user' AND (outside = 1 OR files != '')) "
                        "OR kind IN ('ask', 'sample')) LIMIT 1", [chat, *inside]) is not None

    def set_memory(self, agent: int, memory: int, text: str) -> bool:
        """The memory's text as the person wrote it (its mark of outside text stays)."""
        with self.write() as db:
            return db.conn.execute("UPDATE memories SET text = ? WHERE id = ? AND agent = ?",
                                   [text, memory, agent]).rowcount == 1

    def memory_counts(self, person: int) -> dict[int, int]:
        """How many memories each of the person's agents keeps, by agent id (agents with none left out)."""
        return {r[0]: r[1] for r in self._all(
            "SELECT agent, count(*) FROM memories WHERE agent IN (SELECT id FROM assistants WHERE person = ?) "
            "GROUP BY agent", [person])}

    def delete_memory(self, agent: int, memory: int) -> bool:
        with self.write() as db:
            return db.conn.execute("DELETE FROM memories WHERE id = ? AND agent = ?", [memory, agent]).rowcount == 1

    def update_agent(self, agent_id: int, **values: Any) -> None:
        self._update("assistants", agent_id, {"name", "instructions", "model", "tools", "approve", "thinking",
                                              "suggestions", "vet_memories"}, values)

    def default_agent(self, person: int | None = None) -> Assistant | None:
        """A person's first agent; with no person, the owner's (or, before any account, the
        first one): never another person's, whose memories and plugins are theirs."""
        if person is None:
            row = self._one("SELECT * FROM assistants WHERE person IS NULL OR person = "
                           "(SELECT id FROM people WHERE owner = 1) ORDER BY id LIMIT 1")
        else:
            row = self._one("SELECT * FROM assistants WHERE person = ? ORDER BY id LIMIT 1", [person])
        return Assistant.from_row(row) if row else None

    # --- skills (shared by every agent; no page follows them live, so no rev) --------

    @staticmethod
    def _skill(row: Any) -> Skill:
        return Skill(name=row["name"], description=row["description"], body=row["body"], id=row["id"])

    def skills(self) -> list[Skill]:
        rows = self._all("SELECT * FROM skills")  # by name as a person reads a list, alike on both engines
        return [self._skill(r) for r in sorted(rows, key=lambda r: (reading(r["name"]), r["name"], r["id"]))]

    def skill(self, skill_id: int) -> Skill | None:
        row = self._one("SELECT * FROM skills WHERE id = ?", [skill_id])
        return self._skill(row) if row else None

    def add_skill(self, s: Skill) -> Skill:
        """Raises sqlite3.IntegrityError when the name is taken."""
        t = dbm.now()
        with self.write() as db:
            cur = db.conn.execute(
                "INSERT INTO skills (name, description, body, created, updated) VALUES (?, ?, ?, ?, ?) RETURNING id",
                [s.name, s.description, s.body, t, t])
            skill_id = cur.fetchone()[0]
        return self.skill(skill_id)

    def update_skill(self, skill_id: int, s: Skill) -> None:
        """Raises sqlite3.IntegrityError when the new name is another skill's."""
        with self.write() as db:
            db.conn.execute("UPDATE skills SET name = ?, description = ?, body = ?, updated = ? WHERE id = ?",
                            [s.name, s.description, s.body, dbm.now(), skill_id])

    def delete_skill(self, skill_id: int) -> bool:
        with self.write() as db:
            return db.conn.execute("DELETE FROM skills WHERE id = ?", [skill_id]).rowcount == 1
