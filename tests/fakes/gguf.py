"""GGUF files made to order, in the layout llama.cpp's gguf-py writes (little-endian: magic,
version, counts, typed metadata entries, tensor infos, then the tensors' bytes from an
aligned start): whole, cut off, or saying what a test needs them to say."""
from __future__ import annotations

import struct
from pathlib import Path

F32 = 0


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _entry(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return _string(key) + struct.pack("<I", 8) + _string(value)
    if isinstance(value, list):  # an array of strings, as a tokenizer's
        items = b"".join(_string(v) for v in value)
        return _string(key) + struct.pack("<IIQ", 9, 8, len(value)) + items
    return _string(key) + struct.pack("<I", 4) + struct.pack("<I", value)  # UINT32


def gguf(meta: dict[str, object], tensors: dict[str, tuple[int, ...]] | None = None, version: int = 3,
         magic: bytes = b"GGUF") -> bytes:
    """A whole GGUF file: `meta` as entries (str, int as UINT32, list of str), `tensors` as F32
    tensors of those shapes, their bytes zeros."""
    tensors = {"token_embd.weight": (8, 4)} if tensors is None else tensors
    head = magic + struct.pack("<IQQ", version, len(tensors), len(meta))
    head += b"".join(_entry(k, v) for k, v in meta.items())
    offset, infos, sizes = 0, b"", []
    for name, shape in tensors.items():
        infos += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        infos += struct.pack("<IQ", F32, offset)
        size = 4
        for d in shape:
            size *= d
        sizes.append(size)
        offset += -(-size // 32) * 32
    head += infos
    head += b"\0" * (-len(head) % 32)
    return head + b"\0" * offset


def model(window: int = 4096, architecture: str = "llama", name: str = "Tiny", file_type: int = 15) -> dict[str, object]:
    """The metadata of a model that checks."""
    return {"general.architecture": architecture, "general.name": name, f"{architecture}.context_length": window,
            "general.file_type": file_type, "tokenizer.ggml.tokens": ["<s>", "</s>", "a", "b"]}


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
