"""The model servers the owner added in the browser (app/providers/connections.py), and the
install's default model: rows every worker and server reads when it lists or asks a model, so
a change applies at once everywhere, with no restart. A key is sealed with the app's key
(sealed.py), as a plugin's secret is, and no page shows it again."""
from __future__ import annotations

from typing import Any

from . import db as dbm
from ..providers.connections import Barred, ModelConnection, Tested, may_use
from ..providers.ids import Choice
from .rows import Base

KEY = "connections.key"  # what a connection's key is sealed as
DEFAULT = "models.default"  # the setting naming the model used when a message and its agent name none


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line for line in text.split("\n") if line)


Chosen = dict[int, set[int]]  # connection -> the people ticked for it
ModelsChosen = dict[int, dict[str, frozenset[int]]]  # connection -> its models kept for chosen people -> those people


class Connections(Base):
    def _connection(self, r: Any, people: Chosen | None = None, models: ModelsChosen | None = None) -> ModelConnection:
        """A row as a connection; `people` and `models`: who is chosen for each connection and
        each kept model (read for this row alone when not given)."""
        if people is None:
            people = self._chosen("WHERE connection = ?", [r["id"]])
        if models is None:
            models = self._models_chosen("WHERE r.connection = ?", [r["id"]])
        return ModelConnection(id=r["id"], name=r["name"], prefix=r["prefix"], kind=r["kind"], url=r["url"],
                               key=self.seal(KEY).open(r["key"]) if r["key"] else "", off=_lines(r["models_off"]),
                               listed=_lines(r["listed"]), has_key=bool(r["key"]), tested=r["tested"],
                               everyone=bool(r["everyone"]), people=frozenset(people.get(r["id"], ())),
                               chosen=models.get(r["id"], {}))

    def _chosen(self, where: str = "", params: Any = ()) -> Chosen:
        out: Chosen = {}
        for connection, person in self._all(f"SELECT connection, person FROM connection_people {where}", params):
            out.setdefault(connection, set()).add(person)
        return out

    def _models_chosen(self, where: str = "", params: Any = ()) -> ModelsChosen:
        """The models kept for chosen people, with those people (none ticked: the owner alone)."""
        found: dict[tuple[int, str], set[int]] = {}
        for connection, model, person in self._all(
                f"""SELECT r.connection, r.model, p.person FROM model_rules r
                    LEFT JOIN model_people p ON p.connection = r.connection AND p.model = r.model {where}""", params):
            people = found.setdefault((connection, model), set())
            if person is not None:
                people.add(person)
        out: ModelsChosen = {}
        for (connection, model), people in sorted(found.items()):
            out.setdefault(connection, {})[model] = frozenset(people)
        return out

    def connections(self) -> list[ModelConnection]:
        """Every connection the owner added, by name, keys opened (for the providers, at each
        listing and request: two reads, whatever their number; a page shows `has_key`)."""
        rows = self._all("SELECT * FROM connections ORDER BY name, id")
        people, models = (self._chosen(), self._models_chosen()) if rows else ({}, {})
        return [self._connection(r, people, models) for r in rows]

    def connection(self, connection_id: int) -> ModelConnection | None:
        r = self._one("SELECT * FROM connections WHERE id = ?", [connection_id])
        return self._connection(r) if r else None

    def connection_named(self, name: str) -> ModelConnection | None:
        r = self._one("SELECT * FROM connections WHERE lower(name) = lower(?)", [name])
        return self._connection(r) if r else None

    def add_connection(self, name: str, prefix: str, kind: str, url: str, key: str) -> int:
        with self.write() as db:
            return db.conn.execute(
                "INSERT INTO connections (name, prefix, kind, url, key, created, updated) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [name, prefix, kind, url, self.seal(KEY).seal(key), dbm.now(), dbm.now()]).fetchone()[0]

    def change_connection(self, connection_id: int, name: str, kind: str, url: str, key: str | None) -> None:
        """Its name, kind and address; `key` None keeps the saved key ('' forgets it)."""
        values: dict[str, Any] = {"name": name, "kind": kind, "url": url, "updated": dbm.now()}
        if key is not None:
            values["key"] = self.seal(KEY).seal(key)
        self._set_connection(connection_id, values)

    def set_connection_tested(self, connection_id: int, tested: Tested) -> None:
        """What a Test said; the models it listed, when it reached the server."""
        values: dict[str, Any] = {"tested": tested.words, "updated": dbm.now()}
        if tested.ok:
            values["listed"] = "\n".join(tested.models)
        self._set_connection(connection_id, values)

    def set_models_off(self, connection_id: int, off: tuple[str, ...]) -> None:
        self._set_connection(connection_id, {"models_off": "\n".join(off), "updated": dbm.now()})

    def _set_connection(self, connection_id: int, values: dict[str, Any]) -> None:
        with self.write() as db:
            columns = ", ".join(f"{name} = ?" for name in values)
            db.conn.execute(f"UPDATE connections SET {columns} WHERE id = ?", [*values.values(), connection_id])

    def set_connection_people(self, connection_id: int, everyone: bool, people: frozenset[int]) -> None:
        """Who may use its models: everyone, or the owner and `people` (others' ids are ignored)."""
        with self.write() as db:
            db.conn.execute("UPDATE connections SET everyone = ?, updated = ? WHERE id = ?",
                            [int(everyone), dbm.now(), connection_id])
            db.conn.execute("DELETE FROM connection_people WHERE connection = ?", [connection_id])
            for person in sorted(people):
                db.conn.execute("INSERT INTO connection_people (connection, person) SELECT ?, id FROM people "
                                "WHERE id = ? AND owner = 0", [connection_id, person])

    def set_model_people(self, connection_id: int, model: str, everyone: bool, people: frozenset[int]) -> None:
        """Who may use one model of a connection (its name as listed): everyone its connection
        allows, or the owner and `people` (others' ids are ignored)."""
        with self.write() as db:
            db.conn.execute("DELETE FROM model_rules WHERE connection = ? AND model = ?", [connection_id, model])
            if not everyone:
                db.conn.execute("INSERT INTO model_rules (connection, model) VALUES (?, ?)", [connection_id, model])
                for person in sorted(people):
                    db.conn.execute("INSERT INTO model_people (connection, model, person) SELECT ?, ?, id FROM people "
                                    "WHERE id = ? AND owner = 0", [connection_id, model, person])
            db.conn.execute("UPDATE connections SET updated = ? WHERE id = ?", [dbm.now(), connection_id])

    def barred(self, person: int | None) -> Barred:
        """What `person` may not use: the connections kept for chosen people they are not
        among, and the models so kept (nothing for the owner; all such for nobody signed in).
        The one place access is decided: `may_use` reads what this returns."""
        owner = "EXISTS (SELECT 1 FROM people WHERE id = ? AND owner = 1)"
        prefixes = self._all(
            f"""SELECT prefix FROM connections c WHERE everyone = 0
               AND NOT EXISTS (SELECT 1 FROM connection_people WHERE connection = c.id AND person = ?)
               AND NOT {owner}""", [person, person])
        models = self._all(
            f"""SELECT c.prefix || ':' || r.model FROM model_rules r JOIN connections c ON c.id = r.connection
               WHERE NOT EXISTS (SELECT 1 FROM model_people WHERE connection = r.connection AND model = r.model
                                 AND person = ?)
               AND NOT {owner}""", [person, person])
        return Barred(frozenset(r[0] for r in prefixes), frozenset(r[0] for r in models))

    def choices_for(self, person: int | None) -> list[Choice]:
        """The models `person` may use now (every picker of theirs): the list less the models
        barred to them (their connection's rule or their own)."""
        barred = self.barred(person)
        return [c for c in self.choices() if may_use(c.id, barred)]

    def may_use(self, person: int | None, model: str) -> bool:
        return may_use(model, self.barred(person))

    def delete_connection(self, connection_id: int) -> bool:
        with self.write() as db:
            return db.conn.execute("DELETE FROM connections WHERE id = ?", [connection_id]).rowcount == 1

    def default_model(self) -> str:
        """The model the owner made the default on the Connections page ('' = none chosen)."""
        return self.settings(DEFAULT).get(DEFAULT, "")

    def set_default_model(self, model: str) -> None:
        self.set_settings({DEFAULT: model})
