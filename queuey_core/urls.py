"""URLs with passwords in them (the broker's, the management API's): shown redacted.

A password may hold any character, and people paste them into URLs unencoded: a ``#``
makes ``urllib`` read the rest as a fragment, a ``/`` or ``?`` ends its netloc early, an
``@`` splits it twice. So :func:`redact` does not trust a URL parser: it masks
everything between ``://`` and the last ``@`` whenever the user info is not plainly
``user:password``, and gives up on the whole URL when it cannot find ``://`` at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

REDACTED = "<redacted URL>"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_AUTHORITY_END = re.compile(r"[/?#]")
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")


class _Parts(NamedTuple):
    scheme: str
    userinfo: str | None  # everything before the last "@", None without one
    rest: str  # from the host on
    plain: bool  # the user info holds no "/", "?" or "#": a URL parser agrees with us


def _split(url: str) -> _Parts | None:
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    at = rest.rfind("@")
    if at < 0:
        return _Parts(scheme, None, rest, plain=True)
    end = _AUTHORITY_END.search(rest)
    return _Parts(scheme, rest[:at], rest[at + 1 :], plain=end is None or end.start() > at)


def redact(url: object) -> str:
    """``url`` with its password masked, for logs and messages; never raises.

    ``scheme://user:***@host...`` when the user info is plainly ``user:password``;
    ``scheme://***@host...`` when it holds a ``/``, ``?`` or ``#`` (or the last ``@`` is
    past them), since then nothing before that ``@`` can be trusted not to be password;
    :data:`REDACTED` when there is no ``scheme://`` to anchor on, or no ``@`` and a
    "port" that is not a number (``amqp://guest:secret`` with the host forgotten).
    """
    if not isinstance(url, str):
        return REDACTED
    parts = _split(url)
    if parts is None:
        return REDACTED
    if parts.userinfo is None:
        # No user info, unless a password lost its "@" and now reads as a port.
        return url if _host_problem(parts.rest) is None else REDACTED
    if not parts.plain:
        return f"{parts.scheme}://***@{parts.rest}"
    user, colon, _ = parts.userinfo.partition(":")
    if not colon:
        return url  # a user name alone: nothing secret in it
    return f"{parts.scheme}://{user}:***@{parts.rest}"


def check_url(url: str, schemes: Sequence[str]) -> None:
    """Refuse a URL queuey could not use, with a message that never quotes its password.

    Raises:
        ValueError: no ``scheme://``, a scheme not in ``schemes``, spaces or control
            characters, an unencoded ``/``, ``?`` or ``#`` in the user info, no host, or
            a port that is not a number.
    """
    wanted = " or ".join(f"{s}://" for s in schemes)
    parts = _split(url)
    if parts is None:
        raise ValueError(f"must be a URL starting with {wanted}")
    if parts.scheme.lower() not in schemes:
        raise ValueError(f"must start with {wanted}, not {parts.scheme}://")
    if _UNSAFE.search(url):
        raise ValueError("must not contain spaces or control characters")
    if not parts.plain:
        raise ValueError(
            "its user name or password holds an unencoded '/', '?' or '#' (or its path an "
            "'@'): percent-encode them (%2F, %3F, %23, %40)"
        )
    problem = _host_problem(parts.rest)
    if problem:
        raise ValueError(problem)


def _host_problem(rest: str) -> str | None:
    """What is wrong with the ``host[:port]`` that ``rest`` starts with, if anything."""
    hostport = _AUTHORITY_END.split(rest, maxsplit=1)[0]
    host, port = hostport, None
    if hostport.startswith("["):  # [IPv6] or [IPv6]:port
        close = hostport.find("]")
        after = hostport[close + 1 :] if close >= 0 else ""
        if close < 0 or (after and not after.startswith(":")):
            return "has a malformed IPv6 host"
        host, port = hostport[: close + 1], after[1:] if after else None
    elif ":" in hostport:
        host, _, port = hostport.partition(":")
    if not host:
        return "has no host"
    if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return "has a port that is not a number from 1 to 65535"
    return None


#: Commas that start another URL (the next ``scheme://``) or end the list, so that a
#: password holding a comma of its own is not cut in two.
_NEXT_URL = re.compile(r"\s*,[\s,]*(?=[A-Za-z][A-Za-z0-9+.-]*://|$)")


def split_urls(text: str) -> list[str]:
    """``"amqp://a, amqp://b"`` -> ``["amqp://a", "amqp://b"]``: the URLs of a
    comma-separated list (``QUEUEY_BROKER__URL`` for a cluster), spaces and stray
    commas around them dropped. A comma separates only where a ``scheme://`` follows it
    (or nothing does)."""
    return [part.strip() for part in _NEXT_URL.split(text.strip()) if part.strip()]


def redact_all(urls: Sequence[str]) -> str:
    """Several URLs redacted, for a message: ``a`` alone, or ``any of a, b, c``."""
    shown = [redact(url) for url in urls]
    return shown[0] if len(shown) == 1 else "any of " + ", ".join(shown)


def check_urls(urls: Sequence[str], schemes: Sequence[str]) -> None:
    """Refuse a list of URLs of one service's nodes (a RabbitMQ cluster) queuey could not use.

    Each must pass :func:`check_url`; together, they must share one scheme (one TLS
    set-up serves them all) and one path (a cluster's virtual host is the same on every
    node: two would be two sets of queues), and none may repeat.

    Raises:
        ValueError: naming the URL by its position (from 1), never quoting a password.
    """
    if not urls:
        raise ValueError("give at least one URL")
    for n, url in enumerate(urls, 1):
        if not url:
            raise ValueError(f"URL {n} of {len(urls)} is empty (a stray comma?)")
        try:
            check_url(url, schemes)
            _no_comma_after_user(url)
        except ValueError as exc:
            where = f"URL {n} of {len(urls)}: " if len(urls) > 1 else ""
            raise ValueError(f"{where}{exc}") from None
    if len(urls) == 1:
        return
    parts = [_split(url) for url in urls]
    first = parts[0]
    assert first is not None  # check_url passed
    for n, (url, part) in enumerate(zip(urls, parts, strict=True), 1):
        assert part is not None
        if part.scheme.lower() != first.scheme.lower():
            raise ValueError(
                f"URL {n} of {len(urls)} starts with {part.scheme}://, URL 1 with "
                f"{first.scheme}://: every node is reached the same way"
            )
        if _path(part.rest) != _path(first.rest):
            raise ValueError(
                f"URL {n} of {len(urls)} names another virtual host than URL 1: the "
                "nodes of one cluster share their virtual hosts"
            )
        if url in urls[: n - 1]:
            raise ValueError(f"URL {n} of {len(urls)} repeats an earlier one")


def _no_comma_after_user(url: str) -> None:
    # Commas separate the URLs of a list: one after the user info is a list written
    # wrong (a missing scheme://), or a host or virtual host that needs encoding.
    parts = _split(url)
    if parts is not None and "," in parts.rest:
        raise ValueError(
            "holds a ',' after its user info: start every URL of a list with its "
            "scheme:// (and write a comma in a virtual host as %2C)"
        )


def _path(rest: str) -> str:
    """What follows ``host[:port]`` (the virtual host, and any query)."""
    end = _AUTHORITY_END.search(rest)
    return rest[end.start() :] if end else ""
