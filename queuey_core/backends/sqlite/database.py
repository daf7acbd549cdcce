"""The file: one connection, its pragmas, the versioned schema, and errors in one line.

Owns: opening a ``sqlite://`` file (WAL, busy timeout, synchronous), creating or
checking the schema (upgrading an older file in place), the transactions every other
module runs in, and turning every ``sqlite3`` error into a :class:`SqliteError` whose
message is one line naming the file and what to do. Must never: create a missing
directory (a typo in a path would make a new empty queue somewhere), open a database of
another program or of a newer queuey, write a byte to a file before it is recognised as
a queuey file or an empty one, or let a ``sqlite3`` exception out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator

from queuey_core.backends.sqlite.checkpoints import Checkpointer
from queuey_core.backends.sqlite.explaining import READ_ONLY, explain
from queuey_core.backends.sqlite.options import SqliteOptions
from queuey_core.backends.sqlite.schema import SCHEMA, SCHEMA_VERSION, UPGRADES
from queuey_core.errors import BackendError

logger = logging.getLogger(__name__)

#: RETURNING (3.35) makes a claim one statement.
MIN_SQLITE = (3, 35, 0)
#: Seconds between tries for another process's write lock, the last one repeated until
#: ``busy_timeout``. SQLite's own busy handler sleeps 1, 2, 5, 10 ms... between its tries,
#: so an enqueue or a claim that met another process's commit of a few hundred
#: microseconds waited 1, 3 or 8 ms for it; these tries take the lock within about a
#: tenth of a millisecond of its release, for a failed try (a few microseconds) every
#: millisecond while a long write holds it.
LOCK_RETRY = (0.0001, 0.0001, 0.0002, 0.0005, 0.001)


class SqliteError(BackendError):
    """The file refused an operation. ``maybe_committed`` when a commit was interrupted
    and the write may or may not be in the file."""

    def __init__(self, message: str, *, maybe_committed: bool = False) -> None:
        super().__init__(message)
        self.maybe_committed = maybe_committed


class Database:
    """One connection to the file, shared by the threads of one backend under a lock.

    SQLite serialises writers anyway; one connection keeps a process to one lock holder
    and makes closing simple.
    """

    def __init__(self, options: SqliteOptions) -> None:
        self.options = options
        self.path = options.path
        self._wait_pragma = f"PRAGMA busy_timeout = {round(options.busy_timeout * 1000)}"
        self._lock = threading.RLock()
        self._writing = False  # a write() is open: only the lock's holder can be in it
        self._closed = False
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise SqliteError(
                f"the embedded backend needs SQLite {'.'.join(map(str, MIN_SQLITE))} or later; "
                f"this Python has {sqlite3.sqlite_version}"
            )
        self._conn = self._open()
        self.checkpoints = Checkpointer(self.path, options.busy_timeout)

    # -- transactions ------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """The connection's lock (re-entrant): whoever holds it is the connection's only
        user, :meth:`write` and :meth:`read` included."""
        return self._lock

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: the write lock at once, so that two
        claimers never read the same best row); committed when the block ends.

        Inside another write (the same thread's), it is part of that one: an error rolls
        back both (a unique job's claim and its publish are one transaction on the file).

        Raises:
            SqliteError: the file refused; ``maybe_committed`` when the commit itself was
                interrupted.
        """
        with self._lock:
            conn = self._usable()
            if self._writing:
                try:
                    yield conn
                except sqlite3.Error as exc:
                    raise self.error(exc) from None
                return
            self._begin_immediate(conn)
            self._writing = True
            try:
                yield conn
            except BaseException as exc:
                self._writing = False
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise self.error(exc) from None
                raise
            self._writing = False
            self._commit(conn)

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot of the file (inside a write of
        the same thread, that write's)."""
        with self._lock:
            if self._writing:  # this thread's own write: only the lock's holder can be in it
                with self.write() as conn:
                    yield conn
                return
            conn = self._usable()
            try:
                # SQLite's own waiting for the rare reads that meet a lock (another
                # process recovering the WAL): only writes retry by themselves.
                conn.execute(self._wait_pragma)
                try:
                    conn.execute("BEGIN")
                    try:
                        yield conn
                    finally:
                        if conn.in_transaction:
                            conn.execute("COMMIT")
                finally:
                    conn.execute(_NO_WAIT)
            except sqlite3.Error as exc:
                raise self.error(exc) from None

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap: no disk read)."""
        with self._lock:
            try:
                return int(self._usable().execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise self.error(exc) from None

    def wal_signature(self) -> tuple[int, int, int] | None:
        """The WAL file's inode, size and modification time: every commit of any process
        writes to it, and a ``stat`` costs less than a statement (the idle worker's
        look). None when it cannot be read."""
        try:
            st = os.stat(self.path + "-wal")
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        # Outside the lock: a checkpoint under way never waits for it, but the thread is
        # joined. Closed before the connection, which, the last, checkpoints the rest.
        self.checkpoints.close()
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def error(self, exc: sqlite3.Error) -> SqliteError:
        """``exc`` as one line naming the file and what to do."""
        return SqliteError(f"{self.path}: {explain(exc, self.options.busy_timeout, self.path)}")

    # -- internals ---------------------------------------------------------------------

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, tried again every :data:`LOCK_RETRY` while another
        process holds the write lock, until ``busy_timeout``."""
        deadline: float | None = None
        tries = 0
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                    raise self.error(exc) from None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.options.busy_timeout
                elif now >= deadline:
                    raise self.error(exc) from None
            time.sleep(LOCK_RETRY[min(tries, len(LOCK_RETRY) - 1)])
            tries += 1

    def _usable(self) -> sqlite3.Connection:
        if self._closed:
            raise SqliteError("the backend is closed")
        return self._conn

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # SQLite either still holds the transaction (busy) or rolled it back: the
            # write is surely not in the file.
            self._rollback()
            raise self.error(exc) from None
        except BaseException as exc:
            # Interrupted while committing (a signal, an asynchronous exception): the
            # commit ran or did not, and nothing here can tell.
            self._rollback()
            raise SqliteError(
                f"{self.path}: interrupted while committing ({type(exc).__name__})",
                maybe_committed=True,
            ) from exc
        self.checkpoints.committed(conn.total_changes)

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")

    def _open(self) -> sqlite3.Connection:
        path = self.path
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise SqliteError(f"{path}: directory {parent} does not exist (create it first)")
        if os.path.isdir(path):
            raise SqliteError(f"{path}: is a directory, not a database file")
        # SQLite would only say "unable to open": it needs the -wal and -shm files too.
        if not os.access(parent, os.W_OK) or (
            os.path.exists(path) and not os.access(path, os.W_OK)
        ):
            raise SqliteError(f"{path}: {READ_ONLY}")
        self._recognise_read_only()
        try:
            conn = sqlite3.connect(
                path,
                timeout=self.options.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise self.error(exc) from None
        try:
            # Recognised before anything is written: switching another program's file
            # to WAL would already change its header, before it is refused.
            _check_tables(conn, path)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise SqliteError(f"{path}: cannot use WAL mode (journal_mode is {mode})")
            conn.execute(f"PRAGMA synchronous={self.options.synchronous.upper()}")
            # Checkpoints run on a thread of their own (checkpoints.py), never in a commit.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            _ensure_schema(conn, path)
            # From here on, writes wait for the lock in _begin_immediate, reads with
            # SQLite's own handler (read()).
            conn.execute(_NO_WAIT)
        except sqlite3.Error as exc:
            conn.close()
            raise self.error(exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _recognise_read_only(self) -> None:
        """Check the tables of a file left with a WAL or a rollback journal through a
        read-only connection; refuse another program's.

        A writable connection that only reads still writes to such a file: closing,
        it checkpoints the WAL into the file; opening, it rolls a hot journal back.
        Without them (a file no process holds) it writes nothing, and a read-only one
        would leave -wal and -shm files behind, so it is used only here.
        """
        path = self.path
        if not any(os.path.exists(path + left) for left in ("-wal", "-journal")):
            return
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.options.busy_timeout)
        except sqlite3.Error as exc:
            raise self.error(exc) from None
        try:
            _check_tables(conn, path)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY_ROLLBACK":
                raise SqliteError(
                    f"{path}: has a rollback journal another program left unfinished; "
                    "it is not a queuey file (queuey's are in WAL mode): give queuey a "
                    "file of its own"
                ) from None
            raise self.error(exc) from None
        finally:
            conn.close()


def _ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create the schema in an empty file, upgrade an older one in place; refuse another
    program's or a newer one.

    A file with the current schema is only read (a worker starting while another process
    writes does not wait for the write lock); an empty or older one is changed under it.
    """
    if _check_tables(conn, path) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Again under the lock: another process may have created or upgraded it since.
        version = _check_tables(conn, path)
        if version is None:
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO queuey_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        elif version < SCHEMA_VERSION:
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in UPGRADES[step]:
                    conn.execute(statement)
            conn.execute("UPDATE queuey_schema SET version = ?", (SCHEMA_VERSION,))
            logger.info("%s: upgraded from schema version %d to %d", path, version, SCHEMA_VERSION)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _check_tables(conn: sqlite3.Connection, path: str) -> int | None:
    """The schema version of the file (None: it is empty); refuses the others."""
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if "queuey_schema" in tables:
        version = conn.execute("SELECT max(version) FROM queuey_schema").fetchone()[0]
        if version is None or version > SCHEMA_VERSION:
            raise SqliteError(
                f"{path}: written by a newer queuey (schema version {version}; this "
                f"queuey reads up to {SCHEMA_VERSION}): upgrade queuey to use it"
            )
        return int(version)
    if tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise SqliteError(
            f"{path}: is a database of another program (tables: {shown}); "
            "give queuey a file of its own"
        )
    return None


_NO_WAIT = "PRAGMA busy_timeout = 0"
