"""People's names are one name whatever their case, in any script, on both engines (m034:
`people.folded`, migrations.name_key), and accounts made before it that now share a name's
key are kept, each signing in with their name as it is."""
import pytest

from app.store import db as dbm, schema
from app.store.schema import migrations, pg_migrations
from app.store.people import Taken


@pytest.mark.parametrize("first,second", [
    ("Ada", "ada"), ("Émile", "émile"), ("ÉMILE", "émile"), ("Straße", "STRASSE"), ("Σίσυφος", "ΣΊΣΥΦΟΣ"),
    ("Ａda", "ada"), ("Émile", "E\u0301mile"),  # a full-width letter; é as e and its accent
])
def test_names_differing_only_in_case_are_one_name(store, first, second):
    person = store.add_person(first, "h1", owner=True)
    with pytest.raises(Taken):
        store.add_person(second, "h2")
    found, hashed = store.person_named(second)
    assert (found.id, found.name, hashed) == (person, first, "h1")


def test_names_differing_in_more_than_case_are_two_people(store):
    ids = [store.add_person(name, name) for name in ("Emile", "Émile", "Emilie", "Ιωάννα", "Iwanna")]
    assert len(set(ids)) == 5
    assert [store.person_named(n)[1] for n in ("EMILE", "émile", "emilie", "ΙΩΆΝΝΑ")] == \
        ["Emile", "Émile", "Emilie", "Ιωάννα"]
    assert store.person_named("Émilie") is None


def _before_m034(db):
    """The database as a release before m034 left it."""
    with pytest.MonkeyPatch.context() as patch:
        for where in (migrations, pg_migrations):
            patch.setattr(where, "MIGRATIONS", [fn for fn in where.MIGRATIONS if fn.__name__ != "m034_name_keys"])
        schema.migrate(db)


def _people(db, names):
    for name in names:
        db.execute("INSERT INTO people (name, hash, owner, created) VALUES (?, ?, ?, ?)",
                   [name, f"hash of {name}", int(name == names[0]), 1.0])


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_existing_names_sharing_a_key_are_kept_and_each_signs_in(engine, tmp_path, request):
    from app.store import Store

    db = dbm.connect(request.getfixturevalue("pg_url") if engine == "postgresql" else tmp_path / "t.db")
    try:
        _before_m034(db)
        # Both engines took ß and ss apart before (SQLite's NOCASE is ASCII's, and ICU's level 2
        # keeps ß apart); SQLite took É and é apart too.
        names = ["strasse", "Straße", "Bob"] + (["Émile", "émile"] if engine == "sqlite" else [])
        with dbm.write(db):
            _people(db, names)
        assert "m034_name_keys" in schema.migrate(db)
        store = Store(db)
        assert [p.name for p in store.people()][0] == "strasse"
        assert sorted(p.name for p in store.people()) == sorted(names), "nobody is lost"
        for name in names:  # each signs in with their name as it is
            found, hashed = store.person_named(name)
            assert (found.name, hashed) == (name, f"hash of {name}")
        # another spelling finds the account that kept the key: the earliest
        assert store.person_named("STRASSE")[0].name == "strasse"
        if engine == "sqlite":
            assert store.person_named("ÉMILE")[0].name == "Émile"
        # and no new account takes any of those names in another case
        for name in ["Strasse", "STRAßE", "bob"] + (["ÉMILE", "e\u0301mile"] if engine == "sqlite" else []):
            with pytest.raises(Taken):
                store.add_person(name, "h")
        store.add_person("Alice", "h")
    finally:
        db.conn.close()


@pytest.mark.process
def test_an_install_whose_names_now_share_a_key_moves_and_everyone_signs_in(data, env, pg_url, monkeypatch):
    """An install of a release before m034 holding "Émile" and "émile", "strasse" and "Straße"
    (two people each on SQLite; move-to refused it before, PostgreSQL taking each pair for one
    name) moves whole, and each signs in there with their name as it is."""

    from app.accounts.rules import Accounts
    from app.store import Store
    from app.web.app import create_app
    from tests.conftest import COOKIE, PASSWORD, in_process, password_hash, store_of
    from tests.test_accounts import sign_in
    from tests.test_move import move_to

    data.mkdir(parents=True, exist_ok=True)
    db = dbm.connect(data / "tabletalk.db")
    _before_m034(db)
    names = ["Émile", "émile", "strasse", "Straße"]
    with dbm.write(db):
        for name in names:
            db.execute("INSERT INTO people (name, hash, owner, created) VALUES (?, ?, ?, ?)",
                       [name, password_hash(), int(name == names[0]), 1.0])
    db.conn.close()

    moved = move_to(data, pg_url)
    assert moved.returncode == 0, moved.stderr
    monkeypatch.setenv("DATABASE_URL", pg_url)
    with in_process(create_app(), raise_server_exceptions=False) as client:
        for typed, whose in [*zip(names, names), ("ÉMILE", "Émile"), ("STRASSE", "strasse")]:
            client.cookies.clear()
            r = sign_in(client, typed, PASSWORD)
            assert r.status_code == 303 and r.headers["location"] == "/", (typed, r.text)
            assert Accounts(store_of(client)).session(r.cookies.get(COOKIE)).name == whose
    pg = dbm.connect(pg_url)
    try:
        assert sorted(p.name for p in Store(pg).people()) == sorted(names)
    finally:
        pg.conn.close()


def test_people_are_listed_in_the_same_order_on_both_engines(store):
    for name in ("owner", "zoe", "Émile", "dan", "Frank", "ÅSA", "emil"):
        store.add_person(name, "h", owner=name == "owner")
    assert [p.name for p in store.people()] == ["owner", "ÅSA", "dan", "emil", "Émile", "Frank", "zoe"]


def test_skills_are_listed_in_the_same_order_on_both_engines(store):
    from app.tables import Skill

    for name in ("zeta", "Émincer", "apply", "Edit", "écrire"):
        store.add_skill(Skill(name=name, description="d", body="b"))
    assert [s.name for s in store.skills()] == ["apply", "écrire", "Edit", "Émincer", "zeta"]
