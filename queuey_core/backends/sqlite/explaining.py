"""What a ``sqlite3`` error means for a queuey file, in one line: :func:`explain`.

Owns: the words of the embedded backend's and the SQLite job store's errors (a lock
held too long, a full disk, a file of another program). Must never: print more than
one line, or a path the caller did not give.
"""

from __future__ import annotations

import os
import sqlite3

#: A file or directory queuey cannot write to.
READ_ONLY = (
    "is read-only: queuey writes to the file and to its directory (for the -wal and -shm files)"
)


#: Bytes free under which an I/O error is taken for a full disk: opening a file whose
#: -shm file is gone makes one of 32 KiB, and SQLite then says only "disk I/O error".
NEARLY_FULL = 64 * 1024


def explain(exc: sqlite3.Error, busy_timeout: float, path: str | None = None) -> str:
    """What a ``sqlite3`` error means for a queuey file (at ``path``, whose disk is
    looked at when SQLite says only "disk I/O error"), in a few words, one line."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    lowered = text.lower()
    if "disk i/o" in lowered and path is not None and _free_bytes(path) < NEARLY_FULL:
        lowered = "disk is full"
    if "locked" in lowered or "busy" in lowered:
        return (
            f"locked by another process for more than {busy_timeout:g}s "
            "(raise ?busy_timeout= in the URL, or find what holds it)"
        )
    if "not a database" in lowered:
        return "is not a SQLite database; give queuey a file of its own"
    if "readonly" in lowered or "read-only" in lowered:
        return READ_ONLY
    if "disk is full" in lowered or "full" in lowered:
        return "the disk is full (or the file reached its size limit): nothing was written"
    if "unable to open" in lowered:
        return "cannot be opened (check the path and the directory's permissions)"
    if "disk i/o" in lowered:
        return f"an I/O error from the disk ({text})"
    if "malformed" in lowered or "corrupt" in lowered:
        return f"is damaged ({text})"
    return text


def _free_bytes(path: str) -> int:
    """Bytes this process may still write on the file system of ``path`` (root may use
    the blocks kept for it); a disk that cannot be looked at counts as not full."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return NEARLY_FULL
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize
