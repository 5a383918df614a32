"""Files' bytes by content (app/store/blobs.py) on both engines: put, open as chunks, drop,
stored once, and the rule that drops them with the last row naming them."""
import hashlib

import pytest

from app.store import blobs as blobstore
from app.store.blobs import CHUNK, BlobError


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def held(store) -> int:
    """How many contents the store holds (files under files/, or blobs rows)."""
    if store.blobs.transactional:
        return store.db.conn.execute("SELECT count(*) FROM blobs").fetchone()[0]
    return sum(1 for p in store.blobs.root.rglob("*") if p.is_file()) if store.blobs.root.exists() else 0


def test_the_engine_chooses_where_bytes_live(store, engine):
    kind = blobstore.Rows if engine == "postgresql" else blobstore.Disk
    assert isinstance(store.blobs, kind)
    assert store.blobs.transactional == (engine == "postgresql")


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_bytes_come_back_in_chunks_byte_for_byte(store, size):
    data = bytes((i * 7 + i // 251) % 256 for i in range(size))
    with store.write():
        assert store.blobs.put(data) == (sha(data), size)
    chunks = list(store.blobs.open(sha(data)))
    assert b"".join(chunks) == data and all(len(c) <= CHUNK for c in chunks)
    assert len(chunks) == -(-size // CHUNK)
    assert store.blobs.read(sha(data)) == data and store.blobs.has(sha(data))


def test_the_same_bytes_are_stored_once(store):
    data = b"twice" * 1000
    with store.write():
        first = store.blobs.put(data)
    with store.write():
        assert store.blobs.put(data) == first
    assert held(store) == 1


def test_chunks_from_another_store_are_put_with_their_hash_checked(store, tmp_path):
    """What `tabletalk move-to` does: the bytes of a disk store put here chunk by chunk."""
    data = b"moved " * (CHUNK // 3)
    source = blobstore.Disk(tmp_path / "elsewhere")
    source.put(data)
    first, *rest = source.open(sha(data))
    pieces = iter([b"", first[:5], first[5:], *rest])  # any chunking: cut again to CHUNK
    with store.write():
        assert store.blobs.put(pieces, sha(data)) == (sha(data), len(data))
    assert store.blobs.read(sha(data)) == data
    with pytest.raises(BlobError, match="need the sha256"):
        store.blobs.put(iter([b"no hash"]))
    with pytest.raises(BlobError, match="are not"):
        with store.write():
            store.blobs.put(iter([b"other bytes"]), sha(b"these"))
    with pytest.raises(BlobError, match="are not"):
        store.blobs.put(b"other bytes", sha(b"these"))
    assert not store.blobs.has(sha(b"these")) and held(store) == 1, "nothing kept of refused bytes"


@pytest.mark.parametrize("bad", ["", "../../etc/passwd", "A" * 64, "0" * 63, "0" * 64 + "/x"])
def test_what_is_not_a_sha256_is_never_a_path_or_a_row(store, bad):
    assert store.blobs.open(bad) is None and store.blobs.read(bad) is None and not store.blobs.has(bad)
    with pytest.raises(BlobError):
        store.blobs.put(iter([b"x"]), bad)
    store.blobs.drop(bad)  # nothing to drop


def test_bytes_go_with_the_last_file_row_naming_them(store):
    a = store.add_file("a.txt", b"shared")
    b = store.add_file("b.txt", b"shared")
    c = store.add_file("c.txt", b"alone")
    assert held(store) == 2
    store.forget_files({a})
    assert store.file_bytes(b)[1] == b"shared" and held(store) == 2
    store.forget_files({b, c})
    assert held(store) == 0 and store.file_bytes(b) is None
    d = store.add_file("d.txt", b"shared")  # put again after its drop
    assert store.file_bytes(d)[1] == b"shared" and held(store) == 1


def test_a_write_that_rolls_back_keeps_no_row_and_on_postgresql_no_bytes(store, engine):
    """On SQLite the file is written before the row's transaction (a rollback leaves it, named
    by no row); on PostgreSQL the bytes roll back with the row."""
    with pytest.raises(RuntimeError):
        with store.write():
            store.add_file("gone.txt", b"rolled back")
            raise RuntimeError("the message's write failed")
    assert store.db.conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert held(store) == (0 if engine == "postgresql" else 1)


def test_a_stream_reads_one_chunk_at_a_time(store, engine):
    data = b"z" * (4 * CHUNK)
    fid = store.add_file("big.bin", data)
    row, chunks = store.file_stream(fid)
    assert row["size"] == len(data)
    first = next(chunks)
    assert first == b"z" * CHUNK
    if engine == "postgresql":  # read as consumed: a drop meanwhile ends it with an error, never short
        store.forget_files({fid})
        with pytest.raises(BlobError, match="dropped"):
            list(chunks)
    else:  # the file was opened: a drop meanwhile leaves the stream whole
        store.forget_files({fid})
        assert len(b"".join(chunks)) == 3 * CHUNK
