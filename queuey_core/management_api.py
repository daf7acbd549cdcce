"""The RabbitMQ management API: the unacked counts AMQP cannot tell.

Reached only at ``broker.management_url``, never at a URL guessed from the broker's: a
guess (``http://<host>:15672``) would send the broker's credentials in clear over
HTTP, even for an ``amqps://`` broker. Credentials are the management URL's own, or
else the broker URL's, but those only over HTTPS, or over plain HTTP to the broker's
own host when the user configured that plain-HTTP URL. Redirects are not followed (an
``Authorization`` header would go with them).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.urls import redact

#: Per request; ``queuey queues`` makes one.
TIMEOUT = 2.0
#: The answer is read up to this many bytes.
MAX_ANSWER = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to ask, with which credentials (None: ask without)."""

    base: str  # scheme://host[:port][/prefix], without user info
    vhost: str
    auth: tuple[str, str] | None

    def __repr__(self) -> str:  # never the password, even in a debugger or a log
        return f"Endpoint({self.base!r}, vhost={self.vhost!r}, auth={self.auth is not None})"


def endpoint(management_url: str, broker_url: str | Sequence[str]) -> Endpoint:
    """The endpoint for ``management_url`` (checked by the settings), for ``broker_url``.

    Of a cluster's broker URLs, the one on the management URL's host is used (else the
    first): its credentials, and whether that host is the broker's own.
    """
    mgmt = urllib.parse.urlsplit(management_url)
    host = mgmt.hostname or ""
    brokers = [broker_url] if isinstance(broker_url, str) else list(broker_url)
    parsed = [urllib.parse.urlsplit(url) for url in brokers]
    broker = next((b for b in parsed if host and b.hostname == host), parsed[0])
    netloc = f"[{host}]" if ":" in host else host
    if mgmt.port is not None:
        netloc += f":{mgmt.port}"
    base = urllib.parse.urlunsplit((mgmt.scheme, netloc, mgmt.path.rstrip("/"), "", ""))
    vhost = urllib.parse.unquote(broker.path[1:]) if broker.path[1:] else "/"
    auth: tuple[str, str] | None = None
    if mgmt.username is not None:
        auth = (urllib.parse.unquote(mgmt.username), urllib.parse.unquote(mgmt.password or ""))
    elif mgmt.scheme.lower() == "https" or (host and host == broker.hostname):
        # pika's defaults when the broker URL has none.
        auth = (
            urllib.parse.unquote(broker.username or "guest"),
            urllib.parse.unquote(broker.password or "guest"),
        )
    return Endpoint(base, vhost, auth)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError for the 3xx


_opener = urllib.request.build_opener(_NoRedirects)


@dataclass(frozen=True, slots=True)
class Unacked:
    """Unacked counts by queue, or None with why not."""

    counts: dict[str, int] | None
    why_not: str = ""


def unacked(
    management_url: str | None, broker_url: str | Sequence[str], names: list[str]
) -> Unacked:
    """Unacked counts of ``names`` from the management API; never raises."""
    if management_url is None:
        return Unacked(
            None, "set broker.management_url, e.g. https://rabbit:15671, to see unacked counts"
        )
    try:
        point = endpoint(management_url, broker_url)
    except ValueError:  # the settings check both URLs: only a caller of ours gets here
        return Unacked(None, "broker.management_url is not a usable URL")
    api = (
        f"{point.base}/api/queues/{urllib.parse.quote(point.vhost, safe='')}"
        "?columns=name,messages_unacknowledged"
    )
    headers = {"Accept": "application/json"}
    if point.auth is not None:
        token = base64.b64encode(":".join(point.auth).encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        with _opener.open(urllib.request.Request(api, headers=headers), timeout=TIMEOUT) as r:
            answer = json.loads(r.read(MAX_ANSWER))
        found = {
            str(q["name"]): int(q.get("messages_unacknowledged") or 0)
            for q in answer
            if isinstance(q, dict) and "name" in q
        }
    except urllib.error.HTTPError as exc:
        return Unacked(None, f"the management API at {redact(point.base)} answered {exc.code}")
    except (OSError, ValueError, TypeError) as exc:
        why = getattr(exc, "reason", None) or exc
        return Unacked(None, f"the management API at {redact(point.base)} did not answer: {why}")
    return Unacked({name: found.get(name, 0) for name in names})
