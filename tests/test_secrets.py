"""Secrets kept in the database (migration m028, app/store/secrets.py) on both engines: the key
that signs forms and the setup codes, the same for every server of one database."""
from pathlib import Path

from app.accounts.setup import secret_key, server_id, setup_code, setup_codes, setup_done


def test_the_first_to_ask_makes_a_secret_and_everyone_after_reads_it(store):
    first = store.kept_secret("thing", 24)
    assert len(first) >= 24 and store.kept_secret("thing", 24) == first
    assert store.kept_secret("thing", 24, seed="another value, ignored") == first
    assert store.kept_secret("other", 24) != first


def test_an_installs_secret_key_file_is_kept_and_a_second_folders_is_not(store, tmp_path: Path):
    """The key an install kept in its data folder (before m028) is the database's key from
    then on; another server's folder, with a key of its own, signs with the database's."""
    old, other = tmp_path / "old", tmp_path / "other"
    old.mkdir(), other.mkdir()
    (old / "secret.key").write_text("k" * 64 + "\n")
    (other / "secret.key").write_text("o" * 64)
    assert secret_key(store, old) == b"k" * 64
    assert secret_key(store, other) == b"k" * 64
    assert secret_key(store, tmp_path / "new") == b"k" * 64


def test_a_new_install_makes_its_key_in_the_database_not_in_a_file(store, tmp_path: Path):
    key = secret_key(store, tmp_path)
    assert len(key) >= 48 and secret_key(store, tmp_path / "elsewhere") == key
    assert not (tmp_path / "secret.key").exists()


def test_each_server_has_its_setup_code_and_a_fresh_one_replaces_only_its_own(store, tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert server_id(a) != server_id(b) and server_id(a) == server_id(a)
    code_a, code_b = setup_code(store, a, fresh=True), setup_code(store, b, fresh=True)
    assert code_a != code_b and sorted(setup_codes(store)) == sorted([code_a, code_b])
    assert setup_code(store, a) == code_a, "read again, the same"
    again = setup_code(store, a, fresh=True)  # server A started again
    assert again != code_a and sorted(setup_codes(store)) == sorted([again, code_b])
    setup_done(store)
    assert setup_codes(store) == []
    assert store.kept_secret("secret.key", 48), "other secrets stay"
