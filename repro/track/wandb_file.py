"""wandb's `.wandb` transaction log, parsed directly into protobuf `Record` messages.

A `.wandb` file is a 7-byte file header (`:W&B`, a 2-byte magic, a version byte) followed by
LevelDB-log framing of protobuf `Record` messages (`wandb.proto.wandb_internal_pb2.Record`):
32 KiB blocks; each chunk has a 7-byte header (CRC32C 4 bytes, little-endian length 2 bytes,
type 1 byte: 1 full, 2 first, 3 middle, 4 last); a block tail shorter than a chunk header is
zero padding. Parsing it here takes about 5 ms for a 1,000-point run, against about 0.4 s per
run for a `wandb leet inspect --json` subprocess, which matters when a report scans hundreds
of runs; `repro.track.runs` turns the records into runs.

A run that was killed or is still running ends in a torn chunk or none at all; reading
stops at the first chunk that does not fit, so such a run reads up to its last complete
record. A complete chunk whose checksum (zlib's CRC-32 of its type byte and payload, as
wandb writes it) does not match, or whose header cannot be one, was damaged after it was
written (a bad sector, a copy cut short, a hand edit): reading it ends with `DamagedLog`,
one line naming the file and the byte, rather than a history silently cut short there.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from repro.errors import UserError

BLOCK = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")  # crc32c, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
FILE_HEADER_LEN = 7


class DamagedLog(UserError):
    """A `.wandb` file with a chunk that cannot be what wandb wrote."""

    def __init__(self, file: Path, offset: int, why: str = "a record fails its checksum"):
        self.file, self.offset = file, offset
        super().__init__(f"{file} is damaged at byte {offset} ({why})")


class _BadChunk(Exception):
    def __init__(self, offset: int):
        self.offset = offset


def _chunks(data: bytes, pos: int = FILE_HEADER_LEN) -> Iterator[bytes]:
    """Whole record payloads of a LevelDB-framed log from `pos`, stopping at a torn tail
    or zero fill; `_BadChunk` at a complete chunk that fails its checksum.

    `data` must start at a block boundary; chunks continuing a record that began before
    `data` are skipped."""
    parts: list[bytes] = []
    while True:
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER.size:
            pos += room
            continue
        if pos + CHUNK_HEADER.size > len(data):
            return
        crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        start = pos + CHUNK_HEADER.size
        if crc == length == kind == 0:
            return  # zero fill past the last record
        if kind not in (FULL, FIRST, MIDDLE, LAST) or length > room - CHUNK_HEADER.size:
            raise _BadChunk(pos)
        if start + length > len(data):
            return
        payload = data[start : start + length]
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
            raise _BadChunk(pos)
        pos = start + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            parts = [payload]
        elif parts:
            parts.append(payload)
            if kind == LAST:
                yield b"".join(parts)
                parts = []


def _parsed(payloads: Iterator[bytes]):
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    for payload in payloads:
        record = pb.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError:
            return
        yield record


def records(file: Path):
    data = file.read_bytes()
    if not data.startswith(b":W&B"):
        raise DamagedLog(file, 0, "no ':W&B' header: not a wandb transaction log")
    try:
        yield from _parsed(_chunks(data))
    except _BadChunk as bad:
        raise DamagedLog(file, bad.offset) from None


def has_exit_record(file: Path) -> bool:
    """Whether wandb has written the run's exit record to `file` (its last record).

    Reads only the last two blocks, so it is cheap to poll however long the run is: the exit
    record is small and nothing large follows it."""
    if not file.is_file():
        return False
    size = file.stat().st_size
    start = max(0, (size // BLOCK - 1) * BLOCK)
    with file.open("rb") as f:
        f.seek(start)
        tail = f.read()
    payloads = _chunks(tail, FILE_HEADER_LEN if start == 0 else 0)
    try:
        return any(r.WhichOneof("record_type") == "exit" for r in _parsed(payloads))
    except _BadChunk:
        return False
