"""HTTP messages for the metrics and health endpoints: requests, answers, limits.

What :mod:`.http_server` reads and writes, apart from its loop so that each stays small:
a request head parsed into a :class:`Request`, a :class:`Response` encoded into bytes,
and the :class:`Limits` a server keeps clients to.

Owns: the wire format (HTTP/1.1, every answer ``Connection: close`` and
``Cache-Control: no-store``). Must never: accept a request line that is not
``METHOD target HTTP/x``, or a header line without a name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client, and all of them together, may take from the server."""

    request_timeout: float = 5.0
    """Seconds from the connection to a complete request head; then it is closed."""
    write_timeout: float = 10.0
    """Seconds to send an answer to a client that reads slowly; then it is closed."""
    handler_threads: int = 4
    """Threads computing answers (started as needed, never more)."""
    max_pending: int = 256
    """Complete requests waiting for a handler thread; more are answered 503 at once."""
    max_connections: int = 512
    """Connections open at once (well under a common limit of 1024 descriptors, which the
    worker's broker connections share); one more closes the one that has waited longest
    for its request, so idle clients cannot lock out a health probe."""
    backlog: int = 1024
    """The listen backlog: connections the kernel holds until the loop accepts them."""
    max_head: int = 8192
    """Bytes of request line and headers; more is answered 431."""


@dataclass(frozen=True, slots=True)
class Request:
    """A request as a route sees it: its header names lower-cased."""

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str:
        """The value of header ``name`` (any case), or ``""``."""
        return self.headers.get(name.lower(), "")


@dataclass(frozen=True, slots=True)
class Response:
    """An answer: status, body, its content type and any further headers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


#: Computes the answer to a request, on a handler thread.
Route = Callable[[Request], Response]


@runtime_checkable
class AtOnce(Protocol):
    """A route that can answer some requests on the server's loop thread, without a
    hand-over to a handler thread: a health check that reads state, a cached page.

    ``at_once`` must be quick and never block; None sends the request to a handler
    thread as usual.
    """

    def __call__(self, request: Request) -> Response:
        """The answer, computed on a handler thread."""

    def at_once(self, request: Request) -> Response | None:
        """The answer now, or None."""


def parse_head(head: bytes) -> Request | None:
    """The request in a head (request line and headers), or None when it is not HTTP."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover (latin-1 decodes every byte)
        return None
    lines = text.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    method, target, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    try:
        split = urlsplit(target)
    except ValueError:
        return None
    return Request(method, split.path or "/", split.query, headers)


def plain(status: int, text: str, *headers: tuple[str, str]) -> Response:
    """A text answer."""
    return Response(status, text.encode(), headers=headers)


def encode(response: Response, head_only: bool) -> bytes:
    """The bytes of an answer: status line, headers, and (unless HEAD) the body."""
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = ""
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Cache-Control: no-store",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body
