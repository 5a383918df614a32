"""A GGUF file's header: what a model file says it is, read and checked before anything loads it.

GGUF (llama.cpp's model format): "GGUF", a version, the number of tensors and of metadata
entries, the entries (typed keys and values: general.architecture, {arch}.context_length,
general.file_type, the tokenizer's arrays ...), each tensor's name, shape, type and offset,
then the tensors' bytes from an aligned start. The types and their sizes are those of
llama.cpp's own gguf-py (gguf/constants.py: GGUFValueType, GGMLQuantizationType,
GGML_QUANT_SIZES, LlamaFileType).

`read` refuses, with the reason in words (`NotAModel`), a file that is not GGUF, a version
llama.cpp does not read, a header that runs past the file's end, a model that names no
architecture or claims no window (or an absurd one), and a file shorter than its tensors
need (cut off in a copy or a download). It reads the header alone: the tensors' bytes are
never read, only their extent checked against the file's size.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # 1 is no longer read by llama.cpp
ALIGNMENT = 32  # general.alignment's default
WINDOW_MAX = 1 << 24  # a context length past this is not a model's
COUNT_MAX = 1 << 24  # tensors, entries or array items one header may claim

# GGUFValueType -> struct format of one value (8: string, 9: array are read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# GGMLQuantizationType -> (elements per block, bytes per block)
_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}

# LlamaFileType (general.file_type) -> how it is usually called
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}


class NotAModel(ValueError):
    """The file cannot be served; the message says why, for a person."""


@dataclass(frozen=True)
class Header:
    version: int
    architecture: str  # general.architecture: llama, qwen2, gemma3 ...
    name: str  # general.name, '' when it has none
    window: int  # {architecture}.context_length: the longest context it was made for
    quantization: str  # general.file_type's name (Q4_K_M ...), '' when it says none
    parameters: int  # the elements of all its tensors
    size: int  # the bytes its tensors need the file to have


class _Reader:
    """Little-endian values from a file, never past its end."""

    def __init__(self, f: BinaryIO, size: int):
        self.f, self.size = f, size

    def take(self, n: int) -> bytes:
        if n < 0 or self.f.tell() + n > self.size:
            raise NotAModel("it is cut off: its header runs past the file's end")
        return self.f.read(n)

    def skip(self, n: int) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            raise NotAModel("it is cut off: its header runs past the file's end")
        self.f.seek(n, 1)

    def scalar(self, fmt: str) -> int | float | bool:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        n = int(self.scalar("<Q"))
        if n > COUNT_MAX:
            raise NotAModel(f"its header claims {n:,} {what}, which no model has: the file is damaged")
        return n

    def string(self) -> str:
        n = int(self.scalar("<Q"))
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        """One metadata value; an array is skipped (None), since the header's facts are scalars."""
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = int(self.scalar("<I")), self.count("array items")
            if item in _SCALARS:
                self.skip(n * struct.calcsize(_SCALARS[item]))
            else:
                for _ in range(n):
                    self.value(item)
            return None
        raise NotAModel(f"its header holds a value of an unknown type ({kind}): the file is damaged")


def read(path: Path) -> Header:
    """The header of the GGUF file at `path`, checked; NotAModel says what is wrong with it."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        r = _Reader(f, size)
        if size < 24 or r.take(4) != MAGIC:
            raise NotAModel("it is not a GGUF model file (it does not begin with “GGUF”)")
        version = int(r.scalar("<I"))
        if version not in VERSIONS:
            raise NotAModel(f"it is GGUF version {version}, which llama.cpp does not read (it reads 2 and 3)")
        tensors, entries = r.count("tensors"), r.count("metadata entries")
        meta: dict[str, object] = {}
        for _ in range(entries):
            key = r.string()
            meta[key] = r.value(int(r.scalar("<I")))
        extent = parameters = 0
        for _ in range(tensors):
            r.string()
            dims = int(r.scalar("<I"))
            if dims > 8:
                raise NotAModel(f"a tensor of {dims} dimensions: the file is damaged")
            shape = [int(r.scalar("<Q")) for _ in range(dims)]
            kind, offset = int(r.scalar("<I")), int(r.scalar("<Q"))
            if kind not in _BLOCKS:
                raise NotAModel(f"a tensor of a type llama.cpp does not know ({kind})")
            elements = 1
            for d in shape:
                elements *= d
            per_block, block_bytes = _BLOCKS[kind]
            extent = max(extent, offset + -(-elements // per_block) * block_bytes)
            parameters += elements
        align = meta.get("general.alignment")
        align = align if isinstance(align, int) and align > 0 else ALIGNMENT
        start = -(-f.tell() // align) * align
    architecture = meta.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise NotAModel("it names no architecture (general.architecture), so llama.cpp cannot load it")
    window = meta.get(f"{architecture}.context_length")
    if not isinstance(window, int) or isinstance(window, bool) or not 0 < window <= WINDOW_MAX:
        said = "none" if window is None else f"{window!r} tokens"
        raise NotAModel(f"it claims no usable window ({architecture}.context_length: {said})")
    if start + extent > size:
        raise NotAModel(f"it is cut off: its tensors need {start + extent:,} bytes and the file has {size:,}")
    kind = meta.get("general.file_type")
    name = meta.get("general.name")
    return Header(version, architecture, name if isinstance(name, str) else "", window,
                  FILE_TYPES.get(kind, f"type {kind}") if isinstance(kind, int) else "", parameters, start + extent)
