"""Reading what hf_xet uploads: xorbs (chunks of file data) and shards (which chunks make a file).

Written from xet-core's own serialisation code, so that the Hub stand-in can check an upload the
way the CAS does and give back the bytes of each uploaded file:

- a hash travels as 32 bytes; its hex form prints each 8-byte group as a little-endian u64
  (``DataHash::hex``), so the bytes ``01 00 .. 00`` read ``0000000000000001...``;
- a xorb is a run of chunks, each an 8-byte header (version u8, compressed size u24 LE,
  compression scheme u8, uncompressed size u24 LE) and its data, optionally followed by a
  footer starting with ``XETBLOB``; schemes: 0 none, 1 LZ4 frame, 2 byte-grouping-4 then LZ4;
- a shard starts with a 32-byte tag, version u64 and footer size u64 (48 bytes), then the
  file-info section: per file a 48-byte header (file hash, flags u32, entry count u32, u64),
  that many 48-byte segments (xorb hash, flags u32, bytes u32, first chunk u32, end chunk u32),
  as many verification entries when flag bit 31 is set and one metadata entry when bit 30 is;
  a header whose hash is all 0xFF ends the section.

Cost: linear in the bytes read; the LZ4 decoder is plain Python (fine for test-sized files).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ENTRY = 48
SHARD_TAG_BYTES = 32
WITH_VERIFICATION = 1 << 31
WITH_METADATA_EXT = 1 << 30
BOOKEND = b"\xff" * 32
XORB_FOOTER_IDENT = b"XETBLOB"
LZ4_FRAME_MAGIC = 0x184D2204


class FormatError(ValueError):
    """The bytes are not what the xet format says they should be."""


def hash_hex(raw: bytes) -> str:
    """The hex form of a 32-byte hash, as hf_xet prints it (and the Hub's APIs carry it)."""
    if len(raw) != 32:
        raise FormatError(f"a hash is 32 bytes, not {len(raw)}")
    return "".join(f"{int.from_bytes(raw[i : i + 8], 'little'):016x}" for i in range(0, 32, 8))


@dataclass(frozen=True)
class Segment:
    """Chunks ``[start, end)`` of one xorb, ``size`` bytes once decompressed."""

    xorb: str
    start: int
    end: int
    size: int


def shard_files(shard: bytes) -> dict[str, list[Segment]]:
    """The files a shard describes: file hash -> its segments, in order."""
    if len(shard) < ENTRY:
        raise FormatError("a shard is at least its 48-byte header")
    files: dict[str, list[Segment]] = {}
    offset = ENTRY
    while True:
        header = shard[offset : offset + ENTRY]
        if len(header) < ENTRY:
            raise FormatError("the file-info section has no closing entry")
        if header[:32] == BOOKEND:
            return files
        flags, count = struct.unpack_from("<II", header, 32)
        offset += ENTRY
        segments = []
        for _ in range(count):
            entry = shard[offset : offset + ENTRY]
            if len(entry) < ENTRY:
                raise FormatError("a file segment runs past the end of the shard")
            size, start, end = struct.unpack_from("<III", entry, 36)
            segments.append(Segment(hash_hex(entry[:32]), start, end, size))
            offset += ENTRY
        if flags & WITH_VERIFICATION:
            offset += count * ENTRY
        if flags & WITH_METADATA_EXT:
            offset += ENTRY
        files[hash_hex(header[:32])] = segments


def xorb_chunks(xorb: bytes) -> list[bytes]:
    """The decompressed chunks of a serialised xorb, in order (a trailing footer is skipped)."""
    chunks = []
    offset = 0
    while offset + 8 <= len(xorb) and not xorb.startswith(XORB_FOOTER_IDENT, offset):
        version = xorb[offset]
        stored = int.from_bytes(xorb[offset + 1 : offset + 4], "little")
        scheme = xorb[offset + 4]
        size = int.from_bytes(xorb[offset + 5 : offset + 8], "little")
        body = xorb[offset + 8 : offset + 8 + stored]
        if version != 0 or len(body) != stored:
            raise FormatError(f"bad chunk header at byte {offset} of the xorb")
        data = _decompress(scheme, body)
        if len(data) != size:
            raise FormatError(f"chunk at byte {offset}: {len(data)} bytes, header says {size}")
        chunks.append(data)
        offset += 8 + stored
    return chunks


def _decompress(scheme: int, body: bytes) -> bytes:
    if scheme == 0:
        return body
    if scheme == 1:
        return lz4_frame(body)
    if scheme == 2:
        return _regroup4(lz4_frame(body))
    raise FormatError(f"unknown compression scheme {scheme}")


def _regroup4(grouped: bytes) -> bytes:
    """Undo byte grouping: the data was split into 4 runs (bytes 0,4,8.. then 1,5,9.. ...)."""
    size = len(grouped)
    out = bytearray(size)
    start = 0
    for group in range(4):
        length = size // 4 + (1 if group < size % 4 else 0)
        out[group::4] = grouped[start : start + length]
        start += length
    return bytes(out)


def lz4_frame(frame: bytes) -> bytes:
    """Decode an LZ4 frame (the format lz4_flex's FrameEncoder writes)."""
    if len(frame) < 7 or int.from_bytes(frame[:4], "little") != LZ4_FRAME_MAGIC:
        raise FormatError("not an LZ4 frame")
    flags = frame[4]
    offset = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    out = bytearray()
    while True:
        size = int.from_bytes(frame[offset : offset + 4], "little")
        offset += 4
        if size == 0:
            return bytes(out)
        block = frame[offset : offset + (size & 0x7FFFFFFF)]
        offset += len(block) + (4 if flags & 0x10 else 0)
        if size & 0x80000000:
            out += block
        else:
            _lz4_block(block, out)


def _lz4_block(block: bytes, out: bytearray) -> None:
    """Append the decoded LZ4 block to ``out`` (matches may reach into earlier blocks)."""
    at = 0
    while at < len(block):
        token = block[at]
        at += 1
        literals = token >> 4
        if literals == 15:
            while True:
                extra = block[at]
                at += 1
                literals += extra
                if extra != 255:
                    break
        out += block[at : at + literals]
        at += literals
        if at >= len(block):
            return
        distance = block[at] | (block[at + 1] << 8)
        at += 2
        length = token & 0x0F
        if length == 15:
            while True:
                extra = block[at]
                at += 1
                length += extra
                if extra != 255:
                    break
        length += 4
        if distance == 0 or distance > len(out):
            raise FormatError("an LZ4 match points before the start of the data")
        begin = len(out) - distance
        for index in range(length):  # byte by byte: a match may overlap what it writes
            out.append(out[begin + index])
