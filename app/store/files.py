"""Files: bytes on disk by content hash beside the database, rows here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import db as dbm
from .. import files as filestore
from ..tables import Item
from .base import Base


class Files(Base):
    # --- files (bytes on disk by content hash beside the database, rows here) -------------

    def files_root(self) -> Path:
        """data/files: beside the database (Config.files), wherever this store was opened."""
        main = next((r[2] for r in self.all("PRAGMA database_list") if r[1] == "main"), "")
        return Path(main).parent / "files"

    def add_file(self, name: str, data: bytes, person: int | None = None) -> int:
        """Store bytes (once per content) and a row naming them, `person`'s (else the owner's);
        the type is sniffed here."""
        sha = filestore.save(self.files_root(), data)
        with self.write() as db:
            person = self.owner() if person is None else person
            return db.conn.execute(
                "INSERT INTO files (name, type, size, sha256, created, person) VALUES (?, ?, ?, ?, ?, ?)",
                [filestore.clean_name(name), filestore.sniff(data), len(data), sha, dbm.now(), person]).lastrowid

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
