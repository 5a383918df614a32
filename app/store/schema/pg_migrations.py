"""The PostgreSQL schema: the tables, columns (in the same order), constraints and indexes the
SQLite migrations in app/store/schema/migrations.py end in, as migrations of its own in a `migrations` table.

The first migration is SQLite's end state as of `m022_plugin_page_sessions_stdio` (the
migrations up to it in app/store/schema/migrations.py's order) in one step, frozen in
app/store/schema/pg_m001_to_m022.py with the tables it makes; each later SQLite migration gets one
here under the same name, appended in step
(tests/test_pg_schema.py compares both engines' tables column by column). Types: INTEGER is
BIGINT (SQLite's integers are 64-bit), REAL is DOUBLE PRECISION; SQLite's 0/1 columns stay
integers with the same CHECKs. Ids are identities that are never reused, as items' and
people's AUTOINCREMENT are in SQLite. The `nocase` ICU collation makes the store's `COLLATE
NOCASE` valid here; people's names are unique by a key of their own (m034's `folded`, the
same on both engines), no longer by that collation.

Search is PostgreSQL's full text instead of FTS5: one `search` row per conversation title
(id = -chat) and per user message or finished answer (id = the item's), kept by triggers as
SQLite's are, its `doc` a tsvector of the `tabletalk` configuration (words as they are,
lowercased, accents removed by `unaccent`: "cafe" finds "café") under a GIN index.
"""
from __future__ import annotations

from collections.abc import Callable

from .. import db as dbm
from . import migrations
from .pg_m001_to_m022 import ID, INDEXED, REAL, m001_to_m022  # noqa: F401  (INDEXED: move.py)

# the first, frozen, in app/store/schema/pg_m001_to_m022.py; later ones here, new ones at the end
MIGRATIONS: list[Callable] = [m001_to_m022]
migration = MIGRATIONS.append


def migrate(db) -> list[str]:
    """Apply the migrations not applied yet, each in a write (which holds the write lock, so
    two servers starting at once apply each exactly once); returns their names."""
    with db.write():
        db.execute(f"CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied {REAL} NOT NULL)")
    done = []
    for fn in MIGRATIONS:
        with db.write():
            if db.execute("SELECT 1 FROM migrations WHERE name = ?", [fn.__name__]).fetchone():
                continue
            fn(db)
            db.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)", [fn.__name__, dbm.now()])
        done.append(fn.__name__)
    return done


@migration
def m020_model_limits(db) -> None:
    db.execute(f"""CREATE TABLE model_limits (
        model TEXT PRIMARY KEY,
        "window" BIGINT CHECK ("window" IS NULL OR "window" > 0),
        images BIGINT NOT NULL DEFAULT 1 CHECK (images IN (0, 1)),
        tools BIGINT NOT NULL DEFAULT 1 CHECK (tools IN (0, 1)),
        reasoning BIGINT NOT NULL DEFAULT 1 CHECK (reasoning IN (0, 1)),
        updated {REAL} NOT NULL)""")
    db.execute("ALTER TABLE contexts ADD COLUMN estimated BIGINT NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1))")


@migration
def m021_builtin_model(db) -> None:
    db.execute(f"""CREATE TABLE builtin_model (
        id BIGINT PRIMARY KEY CHECK (id = 1),
        state TEXT NOT NULL DEFAULT '' CHECK (state IN ('', 'wanted', 'installing', 'ready', 'failed')),
        step BIGINT NOT NULL DEFAULT 0,
        steps BIGINT NOT NULL DEFAULT 0,
        what TEXT NOT NULL DEFAULT '',
        percent BIGINT NOT NULL DEFAULT -1,
        line TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        pid BIGINT NOT NULL DEFAULT 0,
        started {REAL} NOT NULL DEFAULT 0,
        finished {REAL} NOT NULL DEFAULT 0,
        serving TEXT NOT NULL DEFAULT '',
        url TEXT NOT NULL DEFAULT '',
        restarts BIGINT NOT NULL DEFAULT 0,
        updated {REAL} NOT NULL DEFAULT 0,
        rev BIGINT NOT NULL DEFAULT 0)""")
    db.execute("INSERT INTO builtin_model (id) VALUES (1)")


@migration
def m027_choice_places(db) -> None:
    db.execute("ALTER TABLE choices ADD COLUMN place BIGINT NOT NULL DEFAULT 0")


@migration
def m023_plugin_requests(db) -> None:
    db.execute("ALTER TABLE items DROP CONSTRAINT items_kind_check")
    db.execute("ALTER TABLE items ADD CONSTRAINT items_kind_check CHECK (kind IN "
               "('user','text','reasoning','call','plan','error','retry','stop','ask','sample'))")
    db.execute("ALTER TABLE items DROP CONSTRAINT items_state_check")
    db.execute("ALTER TABLE items ADD CONSTRAINT items_state_check CHECK (state IN "
               "('','running','done','failed','approval','approved','declined',"
               "'waiting','accepted','cancelled','lost','stopped','withdrawn'))")
    db.execute(f"""CREATE TABLE plugin_auth (
        plugin BIGINT PRIMARY KEY REFERENCES plugins(id) ON DELETE CASCADE,
        client TEXT NOT NULL DEFAULT '',
        tokens TEXT NOT NULL DEFAULT '',
        pending TEXT NOT NULL DEFAULT '',
        flow TEXT NOT NULL DEFAULT '',
        updated {REAL} NOT NULL)""")


@migration
def m028_shared_secrets(db) -> None:
    db.execute(f"""CREATE TABLE secrets (
        name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
        value TEXT NOT NULL CHECK (length(value) >= 16),
        created {REAL} NOT NULL)""")
    # Files' bytes (app/store/blobs.py), PostgreSQL's own: SQLite keeps them in files/ beside
    # its database. One row per content, its bytes in chunks of at most 256 KB, n from 0.
    db.execute(f"""CREATE TABLE blobs (
        sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
        size BIGINT NOT NULL CHECK (size >= 0),
        chunks BIGINT NOT NULL CHECK (chunks >= 0),
        created {REAL} NOT NULL)""")
    db.execute("""CREATE TABLE chunks (
        sha256 TEXT NOT NULL REFERENCES blobs(sha256) ON DELETE CASCADE,
        n BIGINT NOT NULL CHECK (n >= 0),
        data BYTEA NOT NULL CHECK (length(data) BETWEEN 1 AND 262144),
        PRIMARY KEY (sha256, n))""")


@migration
def m030_search_words_regexp(db) -> None:
    # The same words, about 20 times quicker (PostgreSQL's own: SQLite has no such function, so
    # no twin there): translate() looked each character up in its list of 32, which was most of
    # the time a text's indexing took (tabletalk move-to indexes 100,000 at once). The class
    # is the same ASCII punctuation, as ranges: ! to /, : to @, [ to `, { to ~.
    db.execute("""CREATE OR REPLACE FUNCTION search_words(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT regexp_replace(t, '[!-/:-@[-`{-~]', ' ', 'g')
    $$""")


@migration
def m034_name_keys(db) -> None:
    # SQLite's m034: names compared by one key of Python's (migrations.name_key) in a UNIQUE
    # column, instead of the ICU `nocase` collation, whose idea of "the same name" was not
    # SQLite's (nor Python's). The name itself is plain text again (`name = ?` is exact); the
    # collation stays for the store's ORDER BY ... COLLATE NOCASE.
    db.execute("ALTER TABLE people ADD COLUMN folded TEXT NOT NULL DEFAULT ''")
    migrations.key_names(db)
    db.execute("CREATE UNIQUE INDEX people_folded ON people (folded)")
    for (name,) in db.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'people'::regclass "
                              "AND contype = 'u'").fetchall():
        db.execute(f'ALTER TABLE people DROP CONSTRAINT "{name}"')
    db.execute('ALTER TABLE people ALTER COLUMN name TYPE TEXT COLLATE "default"')
    db.execute("CREATE INDEX people_name ON people (name)")


@migration
def m035_text_chunks(db) -> None:
    # SQLite's m035: a growing text's text_chunks while it grows (TOAST rewrites a whole value
    # too, and a chunk of CHUNK_CHARS ASCII characters stays under its threshold). Folded into
    # `text` when the item is done without its text being set (before the row is written:
    # search's trigger sees the whole text).
    db.execute("""CREATE TABLE text_chunks (
        item BIGINT NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        n BIGINT NOT NULL CHECK (n >= 0),
        text TEXT NOT NULL,
        PRIMARY KEY (item, n))""")
    db.execute("""CREATE FUNCTION text_chunks_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM text_chunks WHERE item = NEW.id;
        RETURN NULL;
    END $$""")
    db.execute("CREATE TRIGGER text_chunks_written AFTER UPDATE OF text ON items FOR EACH ROW "
               "EXECUTE FUNCTION text_chunks_written()")
    db.execute("""CREATE FUNCTION text_chunks_done() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE tail TEXT;
    BEGIN
        SELECT string_agg(c.text, '' ORDER BY c.n) INTO tail FROM text_chunks c WHERE c.item = NEW.id;
        IF tail IS NOT NULL THEN
            NEW.text := NEW.text || tail;
            DELETE FROM text_chunks WHERE item = NEW.id;
        END IF;
        RETURN NEW;
    END $$""")
    db.execute("CREATE TRIGGER text_chunks_done BEFORE UPDATE OF done ON items FOR EACH ROW "
               "WHEN (NEW.done = 1 AND OLD.text IS NOT DISTINCT FROM NEW.text) EXECUTE FUNCTION text_chunks_done()")


@migration
def m036_knowledge(db) -> None:
    # SQLite's m036: collections, documents, passages, agents' collections. Full text is a
    # `search_passages` row per passage, its tsvector of the `tabletalk_english` configuration
    # (English stems, as FTS5's porter, accents removed by `unaccent`) under a GIN index, kept
    # by a trigger; ranked by ts_rank_cd (store/knowledge.py).
    db.execute(f"""CREATE TABLE collections (
        id {ID},
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
        description TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 2000),
        shared BIGINT NOT NULL DEFAULT 0 CHECK (shared IN (0, 1)),
        created {REAL} NOT NULL,
        updated {REAL} NOT NULL,
        rev BIGINT NOT NULL DEFAULT 0)""")
    db.execute("CREATE INDEX collections_person ON collections (person)")
    db.execute(f"""CREATE TABLE documents (
        id {ID},
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        collection BIGINT REFERENCES collections(id) ON DELETE CASCADE,
        chat BIGINT REFERENCES conversations(id) ON DELETE CASCADE,
        file BIGINT NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
        kind TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT 'queued'
            CHECK (state IN ('queued', 'reading', 'ready', 'failed', 'stopped')),
        reason TEXT NOT NULL DEFAULT '',
        pages BIGINT NOT NULL DEFAULT 0 CHECK (pages >= 0),
        pages_read BIGINT NOT NULL DEFAULT 0 CHECK (pages_read >= 0),
        passages BIGINT NOT NULL DEFAULT 0 CHECK (passages >= 0),
        owner TEXT,
        leased {REAL},
        created {REAL} NOT NULL,
        updated {REAL} NOT NULL,
        rev BIGINT NOT NULL DEFAULT 0,
        CHECK ((collection IS NULL) <> (chat IS NULL)))""")
    db.execute("CREATE INDEX documents_collection ON documents (collection)")
    db.execute("CREATE INDEX documents_chat ON documents (chat)")
    db.execute("CREATE INDEX documents_file ON documents (file)")
    db.execute("CREATE INDEX documents_work ON documents (state) WHERE state IN ('queued', 'reading')")
    db.execute(f"""CREATE TABLE passages (
        id {ID},
        document BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        page BIGINT NOT NULL CHECK (page >= 1),
        n BIGINT NOT NULL CHECK (n >= 0),
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL CHECK (length(text) >= 1),
        UNIQUE (document, page, n))""")
    db.execute("""CREATE TABLE agent_collections (
        agent BIGINT NOT NULL REFERENCES assistants(id) ON DELETE CASCADE,
        collection BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        PRIMARY KEY (agent, collection))""")
    db.execute("CREATE INDEX agent_collections_collection ON agent_collections (collection)")
    # English stems with no stop words dropped (english_stem drops "is", "how": FTS5 keeps
    # every word, and the two engines find the same passages)
    db.execute("CREATE TEXT SEARCH DICTIONARY tabletalk_stem (TEMPLATE = snowball, Language = english)")
    db.execute("CREATE TEXT SEARCH CONFIGURATION tabletalk_english (COPY = english)")
    db.execute("ALTER TEXT SEARCH CONFIGURATION tabletalk_english ALTER MAPPING FOR word, hword, hword_part, "
               "asciiword, asciihword, hword_asciipart WITH unaccent, tabletalk_stem")
    db.execute("""CREATE TABLE search_passages (
        id BIGINT PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
        document BIGINT NOT NULL,
        doc tsvector NOT NULL)""")
    db.execute("CREATE INDEX search_passages_doc ON search_passages USING GIN (doc)")
    db.execute("CREATE INDEX search_passages_document ON search_passages (document)")
    db.execute("""CREATE FUNCTION search_passages() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO search_passages (id, document, doc) VALUES (NEW.id, NEW.document,
            setweight(to_tsvector('tabletalk_english', search_words(NEW.heading)), 'A')
            || to_tsvector('tabletalk_english', search_words(NEW.text)));
        RETURN NULL;
    END $$""")
    db.execute("CREATE TRIGGER passages_search AFTER INSERT ON passages FOR EACH ROW "
               "EXECUTE FUNCTION search_passages()")


@migration
def m037_documents_rev(db) -> None:
    db.execute("CREATE INDEX documents_rev ON documents (rev)")


@migration
def m038_passage_vectors(db) -> None:
    db.execute(
        """CREATE TABLE passage_vectors (
            passage BIGINT PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            rev BIGINT NOT NULL,
            vector BYTEA NOT NULL CHECK (length(vector) >= 4),
            code BYTEA NOT NULL)""")
    db.execute("CREATE INDEX passage_vectors_rev ON passage_vectors (model, rev)")


@migration
def m039_documents_sent(db) -> None:
    db.execute("ALTER TABLE documents ADD COLUMN sent TEXT NOT NULL DEFAULT ''")


@migration
def m040_items_knowledge(db) -> None:
    db.execute("ALTER TABLE items ADD COLUMN knowledge TEXT NOT NULL DEFAULT ''")


@migration
def m041_builtin_model_brought(db) -> None:
    db.execute("ALTER TABLE builtin_model ADD COLUMN model TEXT NOT NULL DEFAULT ''")


@migration
def m042_password_resets(db) -> None:
    db.execute(
        f"""CREATE TABLE resets (
            id TEXT PRIMARY KEY CHECK (length(id) = 64),
            person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            created {REAL} NOT NULL,
            expires {REAL} NOT NULL)""")
    db.execute("CREATE INDEX resets_person ON resets (person)")


@migration
def m043_model_limits_thought(db) -> None:
    db.execute("ALTER TABLE model_limits ADD COLUMN thought BIGINT NOT NULL DEFAULT 0 CHECK (thought IN (0, 1))")


@migration
def m044_openai_api(db) -> None:
    db.execute(f"""CREATE TABLE api_keys (
        id {ID},
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
        hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
        shown TEXT NOT NULL,
        agent BIGINT REFERENCES assistants(id) ON DELETE CASCADE,
        created {REAL} NOT NULL,
        expires {REAL},
        used {REAL})""")
    db.execute("CREATE INDEX api_keys_person ON api_keys (person)")
    db.execute("CREATE INDEX api_keys_agent ON api_keys (agent)")
    db.execute(f"""CREATE TABLE api_requests (
        id {ID},
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        key BIGINT REFERENCES api_keys(id) ON DELETE SET NULL,
        at {REAL} NOT NULL,
        chat BIGINT,
        turn BIGINT)""")
    db.execute("CREATE INDEX api_requests_person ON api_requests (person, at)")
    db.execute("CREATE INDEX api_requests_key ON api_requests (key)")
    db.execute("""CREATE TABLE settings (
        name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
        value TEXT NOT NULL)""")
    db.execute("ALTER TABLE conversations ADD COLUMN origin TEXT NOT NULL DEFAULT ''")
    db.execute("""CREATE TABLE api_chats (
        chat BIGINT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        system TEXT NOT NULL DEFAULT '',
        tools TEXT NOT NULL DEFAULT '')""")
    db.execute("""CREATE TABLE turn_usage (
        turn BIGINT PRIMARY KEY REFERENCES items(id) ON DELETE CASCADE,
        prompt BIGINT NOT NULL DEFAULT 0,
        completion BIGINT NOT NULL DEFAULT 0,
        cached BIGINT NOT NULL DEFAULT 0,
        requests BIGINT NOT NULL DEFAULT 0,
        estimated BIGINT NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1)))""")


@migration
def m045_items_outside(db) -> None:
    db.execute("ALTER TABLE items ADD COLUMN outside BIGINT NOT NULL DEFAULT 0 CHECK (outside IN (0, 1))")


@migration
def m046_items_search_web(db) -> None:
    db.execute("ALTER TABLE items ADD COLUMN search_web BIGINT NOT NULL DEFAULT 0 CHECK (search_web IN (0, 1))")


@migration
def m047_plugins_instructions(db) -> None:
    db.execute("ALTER TABLE plugins ADD COLUMN instructions TEXT NOT NULL DEFAULT ''")


@migration
def m048_connections(db) -> None:
    db.execute(f"""CREATE TABLE connections (
        id {ID},
        name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 60),
        prefix TEXT NOT NULL UNIQUE CHECK (length(prefix) BETWEEN 1 AND 40),
        kind TEXT NOT NULL CHECK (kind IN ('openai', 'ollama')),
        url TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
        key TEXT NOT NULL DEFAULT '',
        models_off TEXT NOT NULL DEFAULT '',
        listed TEXT NOT NULL DEFAULT '',
        tested TEXT NOT NULL DEFAULT '',
        created {REAL} NOT NULL,
        updated {REAL} NOT NULL)""")


@migration
def m049_connection_people(db) -> None:
    db.execute("ALTER TABLE connections ADD COLUMN everyone BIGINT NOT NULL DEFAULT 1 CHECK (everyone IN (0, 1))")
    db.execute("""CREATE TABLE connection_people (
        connection BIGINT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        PRIMARY KEY (connection, person))""")
    db.execute("CREATE INDEX connection_people_person ON connection_people (person)")


@migration
def m050_people_roles_invitations(db) -> None:
    db.execute("ALTER TABLE people ADD COLUMN admin BIGINT NOT NULL DEFAULT 0 CHECK (admin IN (0, 1))")
    db.execute("CREATE UNIQUE INDEX people_one_owner ON people (owner) WHERE owner = 1")
    db.execute(f"""CREATE TABLE invitations (
        id {ID},
        hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
        admin BIGINT NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
        note TEXT NOT NULL DEFAULT '' CHECK (length(note) <= 80),
        made_by BIGINT REFERENCES people(id) ON DELETE SET NULL,
        created {REAL} NOT NULL,
        expires {REAL} NOT NULL,
        used {REAL},
        person BIGINT REFERENCES people(id) ON DELETE SET NULL,
        revoked {REAL})""")
    db.execute("ALTER TABLE conversations ADD COLUMN kept_from TEXT NOT NULL DEFAULT ''")


@migration
def m051_usage_days(db) -> None:
    db.execute("""CREATE TABLE usage_days (
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        day TEXT NOT NULL CHECK (length(day) = 10),
        model TEXT NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
        prompt BIGINT NOT NULL DEFAULT 0,
        completion BIGINT NOT NULL DEFAULT 0,
        cached BIGINT NOT NULL DEFAULT 0,
        requests BIGINT NOT NULL DEFAULT 0,
        estimated BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (person, day, model))""")
    db.execute("CREATE INDEX usage_days_day ON usage_days (day)")
    db.execute("""CREATE TABLE token_limits (
        person BIGINT PRIMARY KEY REFERENCES people(id) ON DELETE CASCADE,
        tokens BIGINT CHECK (tokens IS NULL OR tokens >= 1))""")


@migration
def m052_reset_makers(db) -> None:
    db.execute("ALTER TABLE resets ADD COLUMN made_by BIGINT REFERENCES people(id) ON DELETE CASCADE")


@migration
def m053_model_people(db) -> None:
    db.execute("""CREATE TABLE model_rules (
        connection BIGINT NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
        model TEXT NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
        PRIMARY KEY (connection, model))""")
    db.execute("""CREATE TABLE model_people (
        connection BIGINT NOT NULL,
        model TEXT NOT NULL,
        person BIGINT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
        PRIMARY KEY (connection, model, person),
        FOREIGN KEY (connection, model) REFERENCES model_rules(connection, model) ON DELETE CASCADE)""")
    db.execute("CREATE INDEX model_people_person ON model_people (person)")


@migration
def m054_passage_words(db) -> None:
    # How many passages hold each word of the index, kept so that a search reads a word's IDF
    # (store/knowledge.py) instead of counting the word's rows over the GIN index, which took
    # ~300 ms for a word in a third of 100,000 passages (PostgreSQL's own, as m030: FTS5
    # keeps its own statistics, so no twin on SQLite). `word` is a lexeme exactly as the
    # passages' tsvectors hold it (their own `tsvector_to_array`); the empty word, which every
    # passage holds, counts the passages; a word no counted passage holds has no row.
    #
    # The rows count the passages up to id `search_passages_counted.upto` (no row: none); the
    # newer ones, fewer than a thousand, a search counts itself from their tsvectors (~1 ms).
    # They are counted a thousand at a time, by the statement that writes the thousandth (a
    # page: ~0.1-0.2 s more, once every hundred pages): counted page by page, a page's ~600
    # words' rows were written with every page, and writing 100,000 passages took 65% longer;
    # counted so (and a page's passages written by one statement), 4-6% (benchmarks/README.md,
    # "Words' counts kept on PostgreSQL"). Every passage up to `upto` is counted: ids are
    # taken and committed in order, as every write holds the store's write lock
    # (docs/postgres.md), the same lock that keeps two writes from ever waiting on a frequent
    # word's row.
    db.execute("""CREATE TABLE search_passage_words (
        word TEXT COLLATE "C" PRIMARY KEY,
        passages BIGINT NOT NULL CHECK (passages >= 0))""")
    db.execute("""CREATE TABLE search_passages_counted (
        id BIGINT PRIMARY KEY CHECK (id = 1),
        upto BIGINT NOT NULL)""")
    # One statement writes the search rows of all the passages a statement wrote (a page's
    # passages at once: Store.read_page; a move's whole COPY), not a row at a time.
    db.execute("DROP TRIGGER passages_search ON passages")
    db.execute("""CREATE OR REPLACE FUNCTION search_passages() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        counted BIGINT := coalesce((SELECT upto FROM search_passages_counted), 0);
        newest BIGINT;
    BEGIN
        INSERT INTO search_passages (id, document, doc) SELECT id, document,
            setweight(to_tsvector('tabletalk_english', search_words(heading)), 'A')
            || to_tsvector('tabletalk_english', search_words(text)) FROM added;
        newest := (SELECT max(id) FROM search_passages);
        IF newest - counted >= 1000 THEN
            INSERT INTO search_passage_words AS w (word, passages)
                SELECT word, count(*) FROM search_passages, unnest(array_append(tsvector_to_array(doc), '')) AS word
                WHERE id > counted GROUP BY word ORDER BY word
                ON CONFLICT (word) DO UPDATE SET passages = w.passages + excluded.passages;
            INSERT INTO search_passages_counted (id, upto) VALUES (1, newest)
                ON CONFLICT (id) DO UPDATE SET upto = excluded.upto;
        END IF;
        RETURN NULL;
    END $$""")
    db.execute("CREATE TRIGGER passages_search AFTER INSERT ON passages REFERENCING NEW TABLE AS added "
               "FOR EACH STATEMENT EXECUTE FUNCTION search_passages()")
    # Deleted, whatever deleted them (a document read again or deleted, its collection, its
    # conversation, its person): `search_passages` rows go by their key's cascade, whose rows
    # PostgreSQL hands this trigger at once, every cascade of the statement together.
    db.execute("""CREATE FUNCTION search_passage_words_gone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        WITH counted AS (
            SELECT word, count(*) AS n FROM gone, unnest(array_append(tsvector_to_array(doc), '')) AS word
            WHERE id <= coalesce((SELECT upto FROM search_passages_counted), 0) GROUP BY word),
        emptied AS (
            DELETE FROM search_passage_words w USING counted c WHERE w.word = c.word AND w.passages <= c.n)
        UPDATE search_passage_words w SET passages = w.passages - c.n FROM counted c
            WHERE w.word = c.word AND w.passages > c.n;
        RETURN NULL;
    END $$""")
    db.execute("CREATE TRIGGER search_passages_gone AFTER DELETE ON search_passages REFERENCING OLD TABLE AS gone "
               "FOR EACH STATEMENT EXECUTE FUNCTION search_passage_words_gone()")
    db.execute("""INSERT INTO search_passage_words (word, passages)
        SELECT word, count(*) FROM search_passages, unnest(array_append(tsvector_to_array(doc), '')) AS word
        GROUP BY word""")
    db.execute("INSERT INTO search_passages_counted (id, upto) SELECT 1, max(id) FROM search_passages HAVING count(*) > 0")


@migration
def m055_watched(db) -> None:
    # SQLite's m055: which conversations a page or an API stream follows, until when.
    db.execute(
        """CREATE TABLE watched (
            chat BIGINT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            until DOUBLE PRECISION NOT NULL)""")


@migration
def m056_search_passages_serial(db) -> None:
    # The passages' search rows never scanned in parallel (PostgreSQL's own: SQLite plans none).
    # They are only ever read by key or by their GIN index, a few thousand at most; a parallel
    # plan never pays there. Yet a search's count of the passages newer than the kept counts
    # (`id > upto`, none to a thousand) was planned as a parallel scan whenever the planner
    # took the table for larger than it is (before its first ANALYZE, after a large load): two
    # workers started for every search, ~7 ms of a query's ~4 (benchmarks/README.md, "Search
    # on PostgreSQL before its statistics").
    db.execute("ALTER TABLE search_passages SET (parallel_workers = 0)")


@migration
def m057_watched_by(db) -> None:
    # SQLite's m057: a mark names the feed that made it.
    db.execute("DROP TABLE watched")
    db.execute(
        """CREATE TABLE watched (
            chat BIGINT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            marker TEXT NOT NULL CHECK (length(marker) BETWEEN 1 AND 100),
            until DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (chat, marker))""")
