"""Broker URLs, as they may be shown: without the password."""

from __future__ import annotations

import urllib.parse


def redact(url: str) -> str:
    """``url`` with its password replaced, for logs and messages; never raises."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))
