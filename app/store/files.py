"""Files: their rows here, their bytes by content hash in `Store.blobs` (app/store/blobs.py):
files beside the database on SQLite, rows of the database on PostgreSQL."""
from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import blobs as blobstore
from . import db as dbm
from .. import files as filestore
from ..tables import Item
from .rows import Base


class Files(Base):
    # --- files (rows here, bytes by content hash in self.blobs) -----------------------------

    @functools.cached_property
    def blobs(self) -> blobstore.Blobs:
        """Where this store keeps files' bytes: in the database on PostgreSQL, else in files/
        beside SQLite's file (wherever this store was opened)."""
        if dbm.postgres(self.db):
            return blobstore.Rows(self.db)
        main = next((r[2] for r in self._all("PRAGMA database_list") if r[1] == "main"), "")
        return blobstore.Disk(Path(main).parent / "files")

    def add_file(self, name: str, data: bytes | filestore.Spooled, person: int | None = None) -> int:
        """Store bytes (once per content) and a row naming them, `person`'s (else the owner's);
        the type is sniffed from them. An upload's bytes are read from its file a chunk at a
        time, never held whole. The bytes and the row commit together on PostgreSQL; on
        SQLite the file is written before the write lock (an upload's fsync holds up no one:
        web/uploads.py writes an upload's before the route's write begins) and again inside
        it if a drop took the same bytes meanwhile."""
        if isinstance(data, filestore.Spooled):
            examined, source = data.examined, data.chunks
        else:
            examined, source = filestore.examine([data]), lambda: data
        blobs = self.blobs
        sha = None if blobs.transactional else blobs.put(source(), examined.sha256)[0]
        with self.write() as db:
            if sha is None or not blobs.has(sha):
                sha = blobs.put(source(), examined.sha256)[0]
            person = self.owner() if person is None else person
            return db.conn.execute(
                "INSERT INTO files (name, type, size, sha256, created, person) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                [filestore.clean_name(name), examined.type, examined.size, sha, dbm.now(), person]).fetchone()[0]

    def files_by_person(self) -> dict[int, int]:
        """Every person's bytes of files, as `person_files` counts them (the owner's People page)."""
        return {r[0]: r[1] for r in self._all("SELECT person, sum(size) FROM files WHERE person IS NOT NULL "
                                              "GROUP BY person")}

    def person_files(self, person: int) -> int:
        """The bytes of a person's files, each row counted (the storage quota's measure):
        attachments, resources, documents and files their tools made."""
        return self._one("SELECT coalesce(sum(size), 0) FROM files WHERE person = ?", [person])[0]

    def forget_files(self, ids: set[int]) -> None:
        """Delete the rows of files no item names any more (their conversation went), and the
        bytes no row names. In the deleting transaction, under the write lock: an upload of
        the same bytes either comes first (its row keeps them) or finds them gone and writes
        them again (add_file)."""
        if not ids:
            return
        with self.write() as db:
            marks = ",".join("?" * len(ids))
            shas = {r[0] for r in db.conn.execute(f"SELECT sha256 FROM files WHERE id IN ({marks})", list(ids))}
            db.conn.execute(f"DELETE FROM files WHERE id IN ({marks})", list(ids))
            kept = {r[0] for r in db.conn.execute(
                f"SELECT sha256 FROM files WHERE sha256 IN ({','.join('?' * len(shas))})", list(shas))} if shas else set()
            for sha in shas - kept:
                self.blobs.drop(sha)

    def files_of(self, items: list[Item]) -> dict[int, dict[str, Any]]:
        """The file rows the items name (attachments and tool-made files), by id."""
        ids = {f for it in items for f in it.file_ids} | {it.file for it in items if it.file}
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: dict(r) for r in self._all(f"SELECT id, name, type, size FROM files WHERE id IN ({marks})", list(ids))}

    def file(self, file_id: int) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM files WHERE id = ?", [file_id])
        return dict(row) if row else None

    def file_bytes(self, file_id: int, most: int | None = None) -> tuple[dict[str, Any], bytes] | None:
        """A file's row and its bytes (what a model is sent), or None; with `most`, its first
        `most` bytes only, read a chunk at a time (a text file's head: no more is sent)."""
        row = self.file(file_id)
        if row is None:
            return None
        if most is None:
            data = self.blobs.read(row["sha256"])
            return (row, data) if data is not None else None
        chunks = self.blobs.open(row["sha256"])
        if chunks is None:
            return None
        head = bytearray()
        try:
            for chunk in chunks:
                head += chunk[:most - len(head)]
                if len(head) >= most:
                    break
        except blobstore.BlobError:  # dropped while read (its conversation deleted): as none
            return None
        finally:
            chunks.close()
        return row, bytes(head)

    def file_stream(self, file_id: int) -> tuple[dict[str, Any], Iterator[bytes]] | None:
        """A file's row and its bytes as chunks read as they are consumed (a download), or None."""
        row = self.file(file_id)
        chunks = self.blobs.open(row["sha256"]) if row else None
        return (row, chunks) if row is not None and chunks is not None else None
