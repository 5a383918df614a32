"""People (docs/people.md): invitation links, links that set a forgotten password, roles, and
removing someone with their conversations kept or deleted. The rules and rows on both engines
(the `store` fixture) with a clock the test moves; the pages through the app in this process,
every refusal in words."""
from __future__ import annotations

import re

import pytest

from app.accounts.invitations import DAY, INVITATION_GONE, Invitations
from app.accounts.passwords import AccountError
from app.accounts.rules import Accounts, token_id
from app.tables import Person, asked
from tests.conftest import COOKIE, csrf, idle, signed_in, soup, start_chat, store_of
from tests.test_accounts import db_rows

HASH = "$argon2id$not-a-real-hash"


class Clock:
    """A clock the test moves (no sleeping)."""

    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# --- the rules and rows, on both engines ---------------------------------------------------------


def people_of(store) -> tuple[Person, Person]:
    accounts = Accounts(store)
    return accounts.add("Ada", HASH, owner=True), accounts.add("Bea", HASH)


def test_an_invitation_works_once_until_it_expires_or_is_withdrawn(store):
    ada, _ = people_of(store)
    clock = Clock()
    invitations = Invitations(store, clock)
    token = invitations.make(ada, days="7", note="Cy from work")
    assert store._one("SELECT hash FROM invitations")[0] == token_id(token), "only the token's hash is kept"
    assert token not in str([tuple(r) for r in store._all("SELECT * FROM invitations")])
    assert invitations.opened(token).note == "Cy from work"

    clock.t += 7 * DAY - 1
    assert invitations.opened(token) is not None, "it works for the days chosen"
    clock.t += 1
    assert invitations.opened(token) is None and invitations.join(token, "Cy", HASH) is None, "expired"
    assert [state for _, state in invitations.listed()] == ["expired"]
    assert Accounts(store).hash_of("Cy") is None, "nothing made"

    clock.t -= DAY
    withdrawn = invitations.make(ada)
    [(latest, _), _] = invitations.listed()
    assert invitations.revoke(latest.id) and not invitations.revoke(latest.id)
    assert invitations.join(withdrawn, "Cy", HASH) is None
    assert [state for _, state in invitations.listed()] == ["revoked", "waiting"]

    with pytest.raises(AccountError, match="already called “Bea”"):
        invitations.join(token, "bea", HASH)
    assert invitations.opened(token) is not None, "a taken name leaves the link unused"
    cy = invitations.join(token, "Cy", HASH)
    assert (cy.name, cy.role) == ("Cy", "member")
    assert invitations.join(token, "Dee", HASH) is None, "used once"
    listed = {i.id: (i.person, state) for i, state in invitations.listed()}
    assert sorted(listed.values()) == [("", "revoked"), ("Cy", "used")]
    assert store.agents(cy.id), "someone who joined has an agent of their own"

    clock.t += 31 * DAY
    invitations.make(ada)  # making one forgets those that ended more than 30 days ago
    assert [state for _, state in invitations.listed()] == ["waiting"]


def test_who_may_invite_whom_and_for_how_long(store):
    ada, bea = people_of(store)
    invitations = Invitations(store, Clock())
    store.set_admin(bea.id, True)
    bea = store.person(bea.id)
    with pytest.raises(AccountError, match="Only the owner makes admins"):
        invitations.make(bea, role="admin")
    for bad in ({"days": "365"}, {"days": ""}, {"role": "owner"}, {"note": "x" * 81}, {"note": "two\nlines"}):
        with pytest.raises(AccountError):
            invitations.make(ada, **bad)
    token = invitations.make(ada, role="admin", days="1")
    assert invitations.join(token, "Cy", HASH).role == "admin"


def test_a_reset_link_expires_by_the_clock_and_ends_only_its_persons_sessions(store):
    ada, bea = people_of(store)
    clock = Clock()
    accounts = Accounts(store, clock)
    beas = [accounts.start_session(bea.id) for _ in range(2)]
    adas = accounts.start_session(ada.id)
    stale = accounts.reset_link(bea.id)
    clock.t += 3 * DAY
    assert accounts.resetting(stale) is None and accounts.reset_password(stale, "new") is None, "expired"
    token = accounts.reset_link(bea.id)
    assert accounts.reset_password(token, "new hash").name == "Bea"
    assert [accounts.session(t) for t in beas] == [None, None]
    assert accounts.session(adas).name == "Ada", "someone else's session goes on"
    assert accounts.reset_password(token, "again") is None, "used once"
    for malformed in ("", "x", "é" * 300, "\x00", "../reset"):
        assert accounts.resetting(malformed) is None


def test_there_is_one_owner_and_roles_change_only_below_it(store):
    ada, bea = people_of(store)
    with pytest.raises(Exception):
        with store.write() as db:
            db.conn.execute("UPDATE people SET owner = 1 WHERE id = ?", [bea.id])
    assert store.person(bea.id).role == "member"
    assert store.set_admin(bea.id, True) and store.person(bea.id).role == "admin"
    assert not store.set_admin(ada.id, True) and store.person(ada.id).role == "owner"
    cy = Accounts(store).add("Cy", HASH)
    assert ada.outranks(store.person(bea.id)) and store.person(bea.id).outranks(cy)
    assert not store.person(bea.id).outranks(ada) and not store.person(bea.id).outranks(store.person(bea.id))


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "delete"])
def test_removing_someone_keeps_or_deletes_their_conversations(store, keep):
    from app.accounts.api_keys import ApiKeys

    ada, bea = people_of(store)
    file = store.add_file("notes.txt", b"Bea's notes", person=bea.id)
    chat = store.new_conversation(store.default_agent(bea.id).id, "Bea's plans", person=bea.id).id
    store.add(asked(chat, "read my notes", files=[file]))
    document = store.add_document(bea.id, file, "notes.txt", chat=chat, kind="text")
    ApiKeys(store).make(bea, "Bea's key")
    Accounts(store).start_session(bea.id)
    before = store.rev()

    assert Accounts(store).remove(bea.id, keep=keep)
    assert store.person(bea.id) is None
    for table in ("sessions", "api_keys", "assistants"):
        assert store._one(f"SELECT count(*) FROM {table} WHERE person = ?", [bea.id])[0] == 0, table
    kept = store.conversation(chat)
    if keep:
        assert (kept.person, kept.kept_from, kept.title) == (ada.id, "Bea", "Bea's plans") and kept.rev > before
        assert store._one("SELECT person FROM files WHERE id = ?", [file])[0] == ada.id, "its files are the owner's"
        assert store._one("SELECT person FROM documents WHERE id = ?", [document])[0] == ada.id
        assert [i.text for i in store.items(chat) if i.kind == "user"] == ["read my notes"]
    else:
        assert kept is None and store._one("SELECT count(*) FROM files WHERE id = ?", [file])[0] == 0
    assert not Accounts(store).remove(ada.id, keep=keep), "the owner is never removed"


# --- the pages ---------------------------------------------------------------------------------


def link_of(response, dom_id: str) -> str:
    return soup(response).select_one(f"#{dom_id}").text


def invite(client, **fields) -> str:
    """An invitation made on the People page: its link."""
    r = client.post("/people/invitations", data={"_csrf_token": csrf(client, "/people"), **fields})
    assert r.status_code == 200, r.text
    return link_of(r, "invitation-link")


def join(client, token: str, name: str = "Cy", password: str = "cy's password", again: str | None = None,
         **kw):
    return client.post("/join", data={"_csrf_token": csrf(client, "/signin"), "token": token,
                                      "name": name, "password": password,
                                      "again": password if again is None else again}, **kw)


def test_an_invitation_from_the_page_to_a_new_person_signed_in(client, data):
    page = soup(client.get("/people"))
    form = page.select_one("form[action='/people/invitations']")
    assert form.select_one("select[name=days] option[selected]")["value"] == "7", "a week unless chosen"
    assert [o["value"] for o in form.select("select[name=role] option")] == ["member", "admin"]
    r = client.post("/people/invitations", data={"_csrf_token": csrf(client, "/people"), "note": "Cy", "days": "30"})
    link = link_of(r, "invitation-link")
    assert re.fullmatch(r"http://testserver(\.local)?/join\?token=[\w-]{40,}", link), link
    assert "for 30 days" in r.text and soup(r).select_one("button.js-only[data-copy='#invitation-link']")
    token = link.split("token=")[1]
    assert db_rows(data, "SELECT hash FROM invitations") == [(token_id(token),)], "kept as its hash only"
    owners = client.cookies.get(COOKIE)

    client.cookies.clear()
    page = client.get(f"/join?token={token}")
    assert page.status_code == 200 and "invited by owner" in soup(page).text
    r = join(client, token, again="not the same")
    assert r.status_code == 400 and "The two passwords differ" in r.text
    assert soup(r).select_one("input[name=name]")["value"] == "Cy", "what was typed is kept"
    r = join(client, token, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert soup(client.get("/account")).select_one("h1").text == "Cy", "signed in as the new person"
    assert "A member of this Tabletalk." in client.get("/account").text
    assert db_rows(data, "SELECT name, owner, admin FROM people WHERE name = 'Cy'") == [("Cy", 0, 0)]

    client.cookies.clear()
    for r in (client.get(f"/join?token={token}"), join(client, token, name="Dee")):
        assert r.status_code == 410 and INVITATION_GONE in soup(r).text
        assert soup(r).select("main form") == [], "words, and nothing else"
    assert db_rows(data, "SELECT count(*) FROM people WHERE name = 'Dee'") == [(0,)]

    client.cookies.set(COOKIE, owners)
    listed = soup(client.get("/people")).select_one("li.invitation.used")
    assert "Used" in listed.text and "Cy joined" in listed.text


def test_an_expired_or_withdrawn_invitation_says_so(client, data):
    expired = invite(client).split("token=")[1]
    withdrawn = invite(client, note="Dee").split("token=")[1]
    with store_of(client).write() as db:  # a week passed (the rows' time moved, no sleeping)
        db.conn.execute("UPDATE invitations SET expires = created - 1 WHERE hash = ?", [token_id(expired)])
    [(dee,)] = db_rows(data, "SELECT id FROM invitations WHERE note = 'Dee'")
    r = client.post(f"/people/invitations/{dee}/revoke", data={"_csrf_token": csrf(client, "/people")},
                    follow_redirects=False)
    assert r.status_code == 303
    states = [li.select_one(".state").text for li in soup(client.get("/people")).select("li.invitation")]
    assert states == ["Withdrawn", "Expired"]
    assert client.post(f"/people/invitations/{dee}/revoke", data={"_csrf_token": csrf(client, "/people")}
                       ).status_code == 404
    client.cookies.clear()
    for token in (expired, withdrawn):
        assert client.get(f"/join?token={token}").status_code == 410
        r = join(client, token)
        assert r.status_code == 410 and INVITATION_GONE in r.text
    assert db_rows(data, "SELECT count(*) FROM people") == [(1,)]


@pytest.mark.parametrize("token", ["", "x", "not-a-token-at-all", "é" * 50, "%00", "../people", "a" * 1_500])
def test_a_malformed_token_is_a_link_that_does_not_work(client, token):
    client.cookies.clear()
    r = client.get("/join", params={"token": token})
    assert r.status_code == 410 and INVITATION_GONE in r.text
    r = join(client, token)
    assert r.status_code == 410 and INVITATION_GONE in r.text
    assert client.get("/reset", params={"token": token}).status_code == 410


@pytest.mark.parametrize("name,status,says", [
    ("", 400, "a name is required"), ("   ", 400, "a name is required"), ("x" * 81, 400, "at most 80 characters"),
    ("two\nlines", 400, "one line"), ("x" * 5_000, 413, "too long"), ("owner", 400, "already called"),
])
def test_a_name_that_cannot_be_is_refused_in_words_and_the_link_still_works(client, data, name, status, says):
    token = invite(client).split("token=")[1]
    client.cookies.clear()
    r = join(client, token, name=name)
    assert r.status_code == status and says in r.text
    assert client.get(f"/join?token={token}").status_code == 200, "still unused"
    assert db_rows(data, "SELECT count(*) FROM people") == [(1,)]


def test_a_member_is_refused_people_connections_and_invitations_in_words(client, data):
    invite(client, note="for later")
    [(waiting,)] = db_rows(data, "SELECT id FROM invitations")
    client.post("/people", data={"_csrf_token": csrf(client), "name": "Bea", "password": "bea's password"})
    [(owner,)] = db_rows(data, "SELECT id FROM people WHERE owner = 1")
    [(bea,)] = db_rows(data, "SELECT id FROM people WHERE name = 'Bea'")
    client.cookies.set(COOKIE, signed_in(data, "Cy", owner=False))
    nav = soup(client.get("/")).select_one("nav.main").text
    assert "People" not in nav and "Connections" not in nav
    for path in ("/people", "/settings/connections", f"/people/{bea}/delete"):
        r = client.get(path)
        assert r.status_code == 403 and "manage people and connections" in soup(r).text, path
    token = csrf(client)
    for path, fields in (("/people", {"name": "Mallory", "password": "a good password"}),
                         ("/people/invitations", {"role": "admin"}),
                         (f"/people/invitations/{waiting}/revoke", {}),
                         (f"/people/{bea}/reset", {}), (f"/people/{bea}/delete", {"conversations": "delete"}),
                         (f"/people/{owner}/delete", {"conversations": "keep"}),
                         ("/settings/connections", {"name": "Mine", "kind": "openai", "url": "http://127.0.0.1:9/v1"})):
        r = client.post(path, data={"_csrf_token": token, **fields}, follow_redirects=False)
        assert r.status_code == 403 and "ask one of them" in r.text, path
    r = client.post(f"/people/{bea}/role", data={"_csrf_token": token, "role": "admin"})
    assert r.status_code == 403 and "owner of this Tabletalk only" in r.text
    assert db_rows(data, "SELECT name, admin FROM people ORDER BY id") == [("owner", 0), ("Bea", 0), ("Cy", 0)]
    assert db_rows(data, "SELECT count(*) FROM invitations WHERE revoked IS NULL") == [(1,)]
    assert db_rows(data, "SELECT count(*) FROM resets") == [(0,)]


def test_the_owner_makes_an_admin_who_manages_members_but_not_the_owner_or_admins(client, data):
    for name in ("Bea", "Cy", "Dee"):
        client.post("/people", data={"_csrf_token": csrf(client), "name": name, "password": "a good password"})
    ids = dict(db_rows(data, "SELECT name, id FROM people"))
    for name in ("Bea", "Dee"):
        r = client.post(f"/people/{ids[name]}/role", data={"_csrf_token": csrf(client), "role": "admin"},
                        follow_redirects=False)
        assert r.status_code == 303
    r = client.post(f"/people/{ids['Cy']}/role", data={"_csrf_token": csrf(client), "role": "owner"})
    assert r.status_code == 400 and "Admin or Member" in r.text
    r = client.post(f"/people/{ids['owner']}/role", data={"_csrf_token": csrf(client), "role": "member"})
    assert r.status_code == 403
    rows = soup(client.get("/people")).select(".people-list tbody tr")
    roles = {tr.select_one("td").text: (tr.select_one("option[selected]") or tr.select("td")[1]).text.split()[0]
             for tr in rows}
    assert roles == {"owner": "Owner", "Bea": "Admin", "Cy": "Member", "Dee": "Admin"}

    client.cookies.set(COOKIE, signed_in(data, "Bea"))
    page = soup(client.get("/people"))
    assert page.select("form[action$='/role']") == [], "only the owner changes roles"
    assert page.select("select[name=role]") == [], "an admin invites members only"
    assert page.select("#api, #web-search") == [], "the API and web search stay the owner's"
    assert client.get("/settings/connections").status_code == 200, "an admin manages connections"
    assert "Bea" not in [a.text for a in page.select("a[href$='/delete']")]
    for target in ("owner", "Dee"):
        r = client.post(f"/people/{ids[target]}/reset", data={"_csrf_token": csrf(client)})
        assert r.status_code == 403 and "Only the owner changes" in r.text or "never changed" in r.text
    assert client.post(f"/people/{ids['Cy']}/reset", data={"_csrf_token": csrf(client)}).status_code == 200
    r = client.post("/people/invitations", data={"_csrf_token": csrf(client), "role": "admin"})
    assert r.status_code == 400 and "Only the owner makes admins" in r.text
    token = invite(client).split("token=")[1]
    assert db_rows(data, "SELECT admin, made_by FROM invitations") == [(0, ids["Bea"])]
    assert token


def test_a_reset_link_ends_that_persons_sessions_and_no_one_elses(client, data):
    for name in ("Bea", "Cy"):
        client.post("/people", data={"_csrf_token": csrf(client), "name": name, "password": "a good password"})
    [(bea,)] = db_rows(data, "SELECT id FROM people WHERE name = 'Bea'")
    beas = [signed_in(data, "Bea") for _ in range(2)]
    cys = signed_in(data, "Cy")
    owners = client.cookies.get(COOKIE)
    token = link_of(client.post(f"/people/{bea}/reset", data={"_csrf_token": csrf(client)}), "reset-link").split("=")[1]
    client.cookies.clear()
    r = client.post("/reset", data={"_csrf_token": csrf(client, f"/reset?token={token}"), "token": token,
                                    "password": "bea's new one", "again": "bea's new one"}, follow_redirects=False)
    assert r.status_code == 303
    assert db_rows(data, "SELECT count(*) FROM sessions WHERE id IN (?, ?)", [token_id(t) for t in beas]) == [(0,)]
    for other in (cys, owners):
        client.cookies.set(COOKIE, other)
        assert client.get("/account").status_code == 200, "another person's session goes on"
    client.cookies.clear()
    r = client.post("/reset", data={"_csrf_token": csrf(client, "/signin"), "token": token,
                                    "password": "again a new one", "again": "again a new one"})
    assert r.status_code == 410 and "does not work any more" in r.text


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "delete"])
def test_removing_someone_asks_first_and_keeps_or_deletes_their_conversations(client, data, fake, keep):
    from app.accounts.api_keys import ApiKeys

    client.post("/people", data={"_csrf_token": csrf(client), "name": "Bea", "password": "a good password"})
    [(bea,)] = db_rows(data, "SELECT id FROM people WHERE name = 'Bea'")
    owners = client.cookies.get(COOKIE)
    client.cookies.set(COOKIE, signed_in(data, "Bea"))
    chat = start_chat(client, "Bea's question", files={"file": ("plan.txt", b"Bea's plan", "text/plain")})
    idle(client, chat)
    store = store_of(client)
    key, _ = ApiKeys(store).make(store.person(bea), "Bea's key")
    client.cookies.set(COOKIE, owners)

    confirm = soup(client.get(f"/people/{bea}/delete"))
    assert [i["value"] for i in confirm.select("input[name=conversations]")] == ["keep", "delete"]
    assert confirm.select_one("input[name=conversations][checked]")["value"] == "keep", "keeping unless chosen"
    r = client.post(f"/people/{bea}/delete", data={"_csrf_token": csrf(client)})
    assert r.status_code == 400 and "kept or deleted" in r.text and db_rows(data, "SELECT count(*) FROM people") == [(2,)]
    r = client.post(f"/people/{bea}/delete", data={"_csrf_token": csrf(client),
                                                   "conversations": "keep" if keep else "delete"},
                    follow_redirects=False)
    assert r.status_code == 303
    assert db_rows(data, "SELECT count(*) FROM sessions WHERE person = ?", [bea]) == [(0,)]
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401, "its keys end"
    if keep:
        assert "yours now" in client.get("/people?saved=kept").text
        page = client.get(chat)
        assert page.status_code == 200 and "Bea's question" in soup(page).text
        mark = soup(client.get("/")).select_one(f"a[href='{chat}'] .origin")
        assert mark.text == "Bea" and "Kept from Bea" in mark["title"]
        [file] = soup(page).select("a[href^='/files/']")[:1]
        assert client.get(file["href"]).content == b"Bea's plan", "the files in it are the owner's too"
    else:
        assert client.get(chat).status_code == 404
        assert db_rows(data, "SELECT count(*) FROM files") == [(0,)]


def test_the_command_line_makes_the_owner_a_reset_link(env, data, capsys, client):
    from app.admin.cli import main

    main(["reset-link", "--url", "https://talk.example/"])
    out = capsys.readouterr().out
    link = re.search(r"https://talk\.example/reset\?token=([\w-]+)", out)
    assert link and "owner's password" in out
    assert client.get(f"/reset?token={link[1]}").status_code == 200
    with pytest.raises(SystemExit, match="nobody is called “Nobody”"):
        main(["reset-link", "Nobody"])


# --- what a review of the roles found -----------------------------------------------------------

PAGE = "/settings/connections"
KEY = "sk-owners-secret-4242"


def form(client, path: str, page: str = PAGE, **fields):
    return client.post(path, data={"_csrf_token": csrf(client, page), **fields}, follow_redirects=False)


def test_a_changed_address_forgets_the_saved_key(client, data):
    """An admin (or a slip) who points the owner's connection elsewhere, the key left empty,
    does not send the key there: the new address gets none unless it is typed again."""
    from tests.fakes.openai_server import FakeModelServer

    with FakeModelServer(models={"big": 4096}, require_key=KEY) as owners, \
            FakeModelServer(models={"x": 4096}, require_key=KEY) as elsewhere:
        assert form(client, PAGE, kind="openai", name="Paid", url=owners.url, key=KEY).status_code == 303
        store = store_of(client)
        k = store.connection_named("Paid")
        client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
        store.set_admin(store.person_named("Bea")[0].id, True)
        assert form(client, f"{PAGE}/{k.id}", kind="openai", name="Paid", url=elsewhere.url, key="").status_code == 303
        k = store.connection(k.id)
        assert k.url == elsewhere.url and not k.has_key and "Wrong key" in k.tested, k.tested
        assert {h.get("authorization") for h in elsewhere.request_headers} <= {None, "Bearer "}, "the key never went there"
        # the same address, the key left empty: kept (typed again, it is the new one)
        assert form(client, f"{PAGE}/{k.id}", kind="openai", name="Paid", url=elsewhere.url, key=KEY).status_code == 303
        assert form(client, f"{PAGE}/{k.id}", kind="openai", name="Paid 2", url=elsewhere.url, key="").status_code == 303
        assert store.connection(k.id).has_key and store.connection(k.id).tested.startswith("Connected")


def test_a_connection_kept_from_an_admin_is_the_owners_to_change(client, data):
    from tests.fakes.openai_server import FakeModelServer

    with FakeModelServer(models={"big": 4096}) as owners:
        form(client, PAGE, kind="openai", name="Paid", url=owners.url, key=KEY)
        store = store_of(client)
        k = store.connection_named("Paid")
        assert form(client, f"{PAGE}/{k.id}/people", everyone="0").status_code == 303  # the owner's alone
        client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
        bea = store.person_named("Bea")[0].id
        store.set_admin(bea, True)
        page = soup(client.get(PAGE))
        assert "only the owner changes it" in page.text and not page.select(f'form[action^="{PAGE}/{k.id}/"]')
        for path, fields in ((f"{PAGE}/{k.id}/people", {"everyone": "0", "person": str(bea)}),
                             (f"{PAGE}/{k.id}/people", {"everyone": "1"}),
                             (f"{PAGE}/{k.id}", {"kind": "openai", "name": "Paid", "url": owners.url}),
                             (f"{PAGE}/{k.id}/test", {}), (f"{PAGE}/{k.id}/models", {}), (f"{PAGE}/{k.id}/delete", {})):
            r = form(client, path, **fields)
            assert r.status_code == 403 and "only the owner changes it" in r.text, (path, r.status_code)
        assert client.get(f"{PAGE}/{k.id}/edit").status_code == 403
        assert not store.may_use(bea, "paid:big") and store.connection(k.id) is not None


def two_people(client, data) -> dict[str, int]:
    for name in ("Bea", "Cy"):
        client.post("/people", data={"_csrf_token": csrf(client), "name": name, "password": "a good password"})
    ids = dict(db_rows(data, "SELECT name, id FROM people"))
    store_of(client).set_admin(ids["Bea"], True)
    return ids


def links_of(client, data, ids: dict[str, int]) -> tuple[str, str]:
    """An invitation and a reset link for Cy, both made by admin Bea."""
    client.cookies.set(COOKIE, signed_in(data, "Bea"))
    invitation = soup(form(client, "/people/invitations", "/people")).select_one("#invitation-link").text.split("token=")[1]
    reset = soup(form(client, f"/people/{ids['Cy']}/reset", "/")).select_one("#reset-link").text.split("token=")[1]
    return invitation, reset


def links_work(client, invitation: str, reset: str) -> tuple[bool, bool]:
    client.cookies.clear()
    return client.get(f"/join?token={invitation}").status_code == 200, client.get(f"/reset?token={reset}").status_code == 200


@pytest.mark.parametrize("how", ["removed", "made a member"])
def test_an_admins_links_end_with_their_right_to_make_them(client, data, how):
    owner = client.cookies.get(COOKIE)
    ids = two_people(client, data)
    invitation, reset = links_of(client, data, ids)
    assert links_work(client, invitation, reset) == (True, True)
    client.cookies.set(COOKIE, owner)
    if how == "removed":
        r = form(client, f"/people/{ids['Bea']}/delete", "/", conversations="delete")
    else:
        r = form(client, f"/people/{ids['Bea']}/role", "/", role="member")
    assert r.status_code == 303
    assert links_work(client, invitation, reset) == (False, False)


def test_a_reset_link_made_for_a_member_ends_when_they_become_an_admin(client, data):
    owner = client.cookies.get(COOKIE)
    ids = two_people(client, data)
    _, reset = links_of(client, data, ids)
    client.cookies.set(COOKIE, owner)
    assert form(client, f"/people/{ids['Cy']}/role", "/", role="admin").status_code == 303
    assert links_work(client, "none", reset)[1] is False, "Bea may not act on admin Cy: nor may her old link"


def test_only_the_owner_withdraws_an_invitation_to_be_an_admin(client, data):
    ids = two_people(client, data)
    made = form(client, "/people/invitations", "/people", role="admin")
    assert made.status_code == 200
    waiting = store_of(client).invitations()[0]
    assert waiting.admin
    client.cookies.set(COOKIE, signed_in(data, "Bea"))
    r = form(client, f"/people/invitations/{waiting.id}/revoke", "/people")
    assert r.status_code == 403 and "Only the owner" in r.text
    assert store_of(client).invitation(waiting.id).revoked is None
    assert ids
