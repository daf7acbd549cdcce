"""What keeps the dashboard safe to put in front of a team.

* :func:`check_address`: listening anywhere but the loopback address needs a token.
* :class:`Guard`, an ASGI middleware in front of every request: the token (``Authorization:
  Bearer``, or the password of HTTP Basic, which a browser prompts for), the ``Host``
  header of a dashboard without a token (only loopback names: a web page cannot reach
  it through DNS rebinding), the CSRF cookie, and security headers on every answer.
* :class:`Csrf`: the token every state-changing request carries, an HMAC of the
  browser's cookie under a secret of the process (a page of another site can neither
  read the cookie nor compute the token).

Must never: print or show the token, or let a write through without its CSRF token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any

from queuey_core.errors import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The cookie that the CSRF token is bound to.
CSRF_COOKIE = "queuey_csrf"
#: Where a write carries its CSRF token: this header (htmx sends it), or a form field.
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
#: Methods that change nothing.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})

#: Sent with every answer: no framing, no sniffing, scripts only from the dashboard.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this
    machine only."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_address(host: str, token: str | None) -> None:
    """Refuse to listen on ``host`` when it is not loopback and no token is set.

    Raises:
        ConfigError: saying how to set a token (never quoting one).
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without a token: anyone who can "
            "reach it could drain workers and delete dead letters. Set [dashboard] token "
            "(or QUEUEY_DASHBOARD__TOKEN, 16 characters or more), or listen on 127.0.0.1"
        )


class Csrf:
    """CSRF tokens bound to a browser's cookie, under a secret of this process."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def token_for(self, cookie: str) -> str:
        """The token that goes with ``cookie``."""
        return hmac.new(self._secret, cookie.encode(), "sha256").hexdigest()

    def valid(self, cookie: str | None, token: str | None) -> bool:
        """Whether ``token`` is the one for ``cookie`` (both given)."""
        if not cookie or not token:
            return False
        return hmac.compare_digest(self.token_for(cookie), token)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def cookie_of(scope: Scope) -> str | None:
    """The CSRF cookie the browser sent, if any."""
    raw = _header(scope, b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed Cookie header is no cookie at all
        return None
    morsel = jar.get(CSRF_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def _authorized(scope: Scope, token: str) -> bool:
    given = _header(scope, b"authorization") or ""
    scheme, _, value = given.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        candidate = value
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        candidate = decoded.partition(":")[2]
    else:
        return False
    return hmac.compare_digest(candidate.encode(), token.encode())


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _cross_site(scope: Scope) -> bool:
    """Whether a write comes from another site (its Origin is not this Host)."""
    if _header(scope, b"sec-fetch-site") in {"cross-site", "same-site"}:
        return True
    origin = _header(scope, b"origin")
    if origin is None or origin == "null":
        return origin == "null"
    host = _header(scope, b"host") or ""
    return origin.partition("://")[2] != host


class Guard:
    """The ASGI middleware that checks every request before the dashboard sees it."""

    def __init__(self, app: ASGIApp, *, token: str | None, csrf: Csrf) -> None:
        self.app = app
        self.token = token
        self.csrf = csrf

    def __repr__(self) -> str:  # never the token
        return f"Guard(token={'set' if self.token else 'none'})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, text, extra = refusal
            await _plain(send, status, text, extra)
            return
        cookie = cookie_of(scope)
        fresh = cookie is None
        if cookie is None:
            cookie = secrets.token_urlsafe(32)
        state = scope.setdefault("state", {})
        state["csrf_cookie"] = cookie
        state["csrf_token"] = self.csrf.token_for(cookie)
        path = (scope.get("root_path") or "") + "/"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += SECURITY_HEADERS
                if fresh:
                    headers.append(
                        (
                            b"set-cookie",
                            f"{CSRF_COOKIE}={cookie}; Path={path}; HttpOnly; "
                            "SameSite=Strict".encode("latin-1"),
                        )
                    )
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        if self.token is not None:
            if not _authorized(scope, self.token):
                challenge = (b"www-authenticate", b'Basic realm="queuey dashboard"')
                return 401, "a token is required (the password of this prompt)", [challenge]
        elif not is_loopback(_host_name(_header(scope, b"host") or "")):
            # Without a token, only this machine may ask, by a loopback name: a page
            # that rebinds its own name to 127.0.0.1 gets no answer.
            return 403, "this dashboard answers only to 127.0.0.1 and localhost", []
        if scope.get("method", "GET") not in SAFE_METHODS and _cross_site(scope):
            return 403, "a write from another site is refused", []
        return None


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = f"{status}: {text}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
