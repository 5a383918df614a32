"""Files: bytes on disk by content hash beside the database, rows here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import db as dbm
from .. import config as configuration
from .. import files as filestore
from ..tables import Item
from .base import Base


class Files(Base):
    # --- files (bytes on disk by content hash beside the database, rows here) -------------

    def files_root(self) -> Path:
        """data/files: beside the database (Config.files), wherever this store was opened; on
        PostgreSQL the data folder's (until the bytes move into rows)."""
        if dbm.postgres(self.db):
            return self.db.files or configuration.load().files
        main = next((r[2] for r in self.all("PRAGMA database_list") if r[1] == "main"), "")
        return Path(main).parent / "files"

    def add_file(self, name: str, data: bytes, person: int | None = None) -> int:
        """Store bytes (once per content) and a row naming them, `person`'s (else the owner's);
        the type is sniffed here."""
        root = self.files_root()
        sha = filestore.save(root, data)  # before the write lock: an upload's fsync holds up no one
        with self.write() as db:
            person = self.owner() if person is None else person
            file_id = db.conn.execute(
                "INSERT INTO files (name, type, size, sha256, created, person) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                [filestore.clean_name(name), filestore.sniff(data), len(data), sha, dbm.now(), person]).fetchone()[0]
            if not filestore.path_of(root, sha).exists():
                filestore.save(root, data)  # the same bytes were let go (forget_files) meanwhile
            return file_id

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
                filestore.forget(self.files_root(), sha)

    def files_of(self, items: list[Item]) -> dict[int, dict[str, Any]]:
        """The file rows the items name (attachments and tool-made files), by id."""
        ids = {f for it in items for f in it.file_ids} | {it.file for it in items if it.file}
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: dict(r) for r in self.all(f"SELECT id, name, type, size FROM files WHERE id IN ({marks})", list(ids))}

    def file(self, file_id: int) -> dict[str, Any] | None:
        row = self.one("SELECT * FROM files WHERE id = ?", [file_id])
        return dict(row) if row else None

    def file_bytes(self, file_id: int) -> tuple[dict[str, Any], bytes] | None:
        row = self.file(file_id)
        data = filestore.load(self.files_root(), row["sha256"]) if row else None
        return (row, data) if row is not None and data is not None else None
