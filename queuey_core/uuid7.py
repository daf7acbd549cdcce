"""Time-ordered job ids: version 7 UUIDs (RFC 9562).

Owns: :func:`uuid7`. No I/O but the OS's random source.

Why not ``uuid4``: every store that keeps jobs by id (the job store, the dead-letter
tables) indexes that id in a B-tree. Random ids land on random pages, so each commit
rewrites a page per row; ids that start with their enqueue time land beside each other
at the tree's right edge. Measured on the SQLite job store with 30,000 to 60,000 jobs
in it, batches of 125: 39 us a job with version 4 ids, 8.6 with version 7. Ids of one
millisecond differ in 74 random bits: a million of them made in the same millisecond
collide with a chance of about 3 in 10^11.
"""

from __future__ import annotations

import os
import time
import uuid

_RANDOM = (0xFFF << 64) | ((1 << 62) - 1)  # rand_a and rand_b
_VERSION_AND_VARIANT = (7 << 76) | (0b10 << 62)
_MS = (1 << 48) - 1


def uuid7(ms: int | None = None, entropy: bytes | None = None) -> uuid.UUID:
    """A version 7 UUID: ``ms`` (milliseconds since the epoch, now if None) in its first
    48 bits, then random bits from ``entropy`` (at least 10 bytes; fresh ones if None).

    Ids made in one millisecond are in random order among themselves; ids of different
    milliseconds sort by time, as text and as UUIDs.
    """
    if ms is None:
        ms = time.time_ns() // 1_000_000
    bits = int.from_bytes(os.urandom(10) if entropy is None else entropy, "big")
    return uuid.UUID(int=((ms & _MS) << 80) | (bits & _RANDOM) | _VERSION_AND_VARIANT)
