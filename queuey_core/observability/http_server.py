"""A small HTTP server for metrics and health endpoints that bounds what clients can take.

One event-loop thread (:mod:`selectors`) accepts connections, reads each request head
against a deadline and writes each answer without blocking; a fixed pool of handler
threads computes the answers. So an idle or slow client costs a socket and a few hundred
bytes, never a thread; a client that hangs up costs at most one debug log line.

Why not ``http.server``'s ``ThreadingHTTPServer``: it gives every connection a thread of
its own with no timeout (300 idle connections were 312 threads), listens with a backlog
of 5, and prints a traceback to stderr when a client leaves before its answer is
written. Why not a server library (waitress, cheroot, an ASGI server): each adds start-up
time and memory to every worker for three read-only GET endpoints; the loop here is a few
hundred lines of the standard library.

Owns: the listening socket, the loop thread, the handler pool and every connection's
deadlines. Must never: give a connection a thread, wait on a client without a deadline,
write to stderr (everything goes through :mod:`logging`), or let a handler's exception
end the loop. Every answer closes its connection (``Connection: close``): a scraper
reconnects, and no idle keep-alive connection is held.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from queuey_core.errors import ConfigError
from queuey_core.observability.http_messages import (
    AtOnce,
    Limits,
    Request,
    Response,
    Route,
    encode,
    parse_head,
    plain,
)

logger = logging.getLogger(__name__)


class _Conn:
    """One client connection, known to the loop thread only."""

    __slots__ = ("deadline", "head", "out", "path", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: str, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = deadline
        self.head = bytearray()
        self.out: memoryview | None = None
        self.path = ""


_LISTEN = object()
_WAKE = object()


class HttpServer:
    """Serves ``routes`` (a path to a :data:`Route`) on ``host:port`` until closed.

    Only GET and HEAD are answered; a path without a route is 404. ``port=0`` picks a
    free port (read it back from :attr:`port`).
    """

    def __init__(
        self,
        routes: Mapping[str, Route],
        *,
        host: str,
        port: int,
        limits: Limits | None = None,
        name: str = "queuey-http",
    ) -> None:
        self._routes = dict(routes)
        self._host = host
        self._requested = port
        self._limits = limits or Limits()
        self._name = name
        self._sock: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closing = False
        self._conns: set[_Conn] = set()
        self._done: collections.deque[tuple[_Conn, bytes]] = collections.deque()
        self._pending = 0
        self._accept_paused = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose, if it was given 0)."""
        if self._sock is None:
            return self._requested
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        """Where it listens, e.g. ``http://0.0.0.0:9191``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def open_connections(self) -> int:
        """Client connections open now (approximate when read from another thread)."""
        return len(self._conns)

    def start(self) -> HttpServer:
        """Listen, and serve on a daemon thread of its own.

        Raises:
            ConfigError: the port cannot be listened on (in use, or not allowed).
        """
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        try:
            sock = socket.create_server(
                (self._host, self._requested), family=family, backlog=self._limits.backlog
            )
        except OSError as exc:
            # create_server appends "(while attempting to bind on address ...)" to
            # strerror; the message already names the address once.
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigError(
                f"cannot serve metrics on {self._host}:{self._requested}: {why}"
            ) from None
        sock.setblocking(False)
        self._sock = sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ, _LISTEN)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._pool = ThreadPoolExecutor(self._limits.handler_threads, thread_name_prefix=self._name)
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop listening and drop every connection; returns once the loop has ended."""
        if self._closing:
            return
        self._closing = True
        self._wake()
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._conns):
            self._drop(conn)
        if self._selector is not None:
            self._selector.close()
        if self._sock is not None:
            self._sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the loop thread -------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._selector is not None
        sweep_every = min(0.25, self._limits.request_timeout / 4)
        next_sweep = time.monotonic() + sweep_every
        while not self._closing:
            try:
                wait = max(0.0, next_sweep - time.monotonic())
                for key, mask in self._selector.select(wait):
                    if key.data is _LISTEN:
                        self._accept()
                    elif key.data is _WAKE:
                        self._drain_wake()
                    elif key.data not in self._conns:
                        continue  # closed by an earlier event of this batch
                    elif mask & selectors.EVENT_READ:
                        self._read(key.data)
                    elif mask & selectors.EVENT_WRITE:
                        self._write(key.data)
                self._answer_done()
                now = time.monotonic()
                if now >= next_sweep:
                    self._expire(now)
                    next_sweep = now + sweep_every
                    if self._accept_paused and self._sock is not None:
                        self._accept_paused = False
                        self._selector.register(self._sock, selectors.EVENT_READ, _LISTEN)
            except Exception:  # a bug here must not end the endpoints; say it once a turn
                logger.error("the HTTP server's loop failed; it goes on", exc_info=True)
                time.sleep(0.05)

    def _accept(self) -> None:
        assert self._sock is not None
        assert self._selector is not None
        while True:
            try:
                sock, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors, most likely: the listening socket stays readable,
                # so stop watching it until the next sweep rather than spin on it.
                logger.warning("could not accept a connection: %s", exc.strerror or exc)
                self._selector.unregister(self._sock)
                self._accept_paused = True
                return
            if len(self._conns) >= self._limits.max_connections and not self._evict():
                sock.close()
                logger.debug("connection refused: %d open already", len(self._conns))
                continue
            sock.setblocking(False)
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            conn = _Conn(sock, peer, time.monotonic() + self._limits.request_timeout)
            self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _evict(self) -> bool:
        """Make room by closing the connection that has waited longest for its request
        (so idle clients cannot lock out a health probe); False if none is waiting."""
        assert self._selector is not None
        waiting = [c for c in self._conns if c.out is None and c.deadline != float("inf")]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.deadline)
        logger.debug(
            "HTTP client closed to make room: idle the longest", extra={"peer": oldest.peer}
        )
        self._selector.unregister(oldest.sock)
        self._drop(oldest)
        return True

    def _read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._left(conn, f"while sending its request ({exc.strerror or exc})")
            return
        if not chunk:
            self._left(conn, "before sending a whole request" if conn.head else "without a request")
            return
        conn.head += chunk
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            end = conn.head.find(b"\n\n")
        if end < 0:
            if len(conn.head) > self._limits.max_head:
                self._respond(conn, plain(431, "request head too large\n"))
            return
        if end > self._limits.max_head:
            self._respond(conn, plain(431, "request head too large\n"))
            return
        self._dispatch(conn, bytes(conn.head[:end]))

    def _dispatch(self, conn: _Conn, head: bytes) -> None:
        request = parse_head(head)
        if request is None:
            self._respond(conn, plain(400, "bad request\n"))
            return
        conn.path = request.path
        if request.method not in {"GET", "HEAD"}:
            self._respond(conn, plain(405, "only GET and HEAD\n", ("Allow", "GET, HEAD")))
            return
        route = self._routes.get(request.path)
        if route is None:
            paths = ", ".join(sorted(self._routes))
            self._respond(conn, plain(404, f"not found: {paths}\n"), request.method)
            return
        if isinstance(route, AtOnce):
            try:
                answer = route.at_once(request)
            except Exception:
                logger.error("answering %s failed", request.path, exc_info=True)
                answer = plain(500, "internal error\n")
            if answer is not None:
                self._respond(conn, answer, request.method)
                return
        if self._pending >= self._limits.max_pending:
            busy = plain(503, "busy: try again\n", ("Retry-After", "1"))
            self._respond(conn, busy, request.method)
            return
        assert self._selector is not None
        assert self._pool is not None
        self._selector.unregister(conn.sock)  # nothing more is read from it
        conn.deadline = float("inf")  # the handler's time is not the client's fault
        self._pending += 1
        self._pool.submit(self._handle, conn, route, request)

    def _respond(self, conn: _Conn, response: Response, method: str = "GET") -> None:
        """Answer from the loop thread itself (errors, no route, busy, at once)."""
        assert self._selector is not None
        self._selector.unregister(conn.sock)
        self._start_write(conn, encode(response, method == "HEAD"))

    def _answer_done(self) -> None:
        while self._done:
            conn, data = self._done.popleft()
            self._pending -= 1
            if conn in self._conns:
                self._start_write(conn, data)

    def _start_write(self, conn: _Conn, data: bytes) -> None:
        assert self._selector is not None
        conn.out = memoryview(data)
        conn.deadline = time.monotonic() + self._limits.write_timeout
        self._write(conn, registered=False)

    def _write(self, conn: _Conn, *, registered: bool = True) -> None:
        assert self._selector is not None
        assert conn.out is not None
        try:
            while conn.out:
                sent = conn.sock.send(conn.out)
                conn.out = conn.out[sent:]
        except (BlockingIOError, InterruptedError):
            if not registered:
                self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
            return
        except OSError as exc:
            if registered:
                self._selector.unregister(conn.sock)
            self._left(conn, f"before reading its answer ({exc.strerror or exc})", registered=False)
            return
        if registered:
            self._selector.unregister(conn.sock)
        self._drop(conn)

    def _expire(self, now: float) -> None:
        assert self._selector is not None
        for conn in [c for c in self._conns if c.deadline <= now]:
            what = "send its request" if conn.out is None else "read its answer"
            logger.debug(
                "HTTP client too slow to %s: closed",
                what,
                extra={"peer": conn.peer, "path": conn.path or None},
            )
            self._selector.unregister(conn.sock)
            self._drop(conn)

    def _left(self, conn: _Conn, when: str, *, registered: bool = True) -> None:
        """A client hung up: one debug line (a timed-out scrape or probe is routine)."""
        logger.debug(
            "HTTP client left %s", when, extra={"peer": conn.peer, "path": conn.path or None}
        )
        if registered and self._selector is not None:
            self._selector.unregister(conn.sock)
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        conn.out = None
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def _wake(self) -> None:
        # Full: the loop is woken already; closed: it has ended.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # -- the handler threads -----------------------------------------------------------------

    def _handle(self, conn: _Conn, route: Route, request: Request) -> None:
        try:
            response = route(request)
        except Exception:
            logger.error("answering %s failed", request.path, exc_info=True)
            response = plain(500, "internal error\n")
        self._done.append((conn, encode(response, request.method == "HEAD")))
        self._wake()
