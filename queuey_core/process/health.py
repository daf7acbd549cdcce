"""Asking a running queuey process for its health from beside it: what ``queuey health``
runs, as a container's ``HEALTHCHECK`` or a Kubernetes exec probe.

One check fits every long-running subcommand: the worker and the scheduler serve
``/healthz`` on their metrics port, the dashboard on its own port, and
:func:`health_endpoints` lists where a configuration says they would be. A container
runs one of them, so :func:`probe` asks each in turn and the first that answers
decides; nothing answering is unhealthy too (the process has not started listening, or
its server is gone).

Owns: where each process answers, and the asking. Must never: print or log the
dashboard's token (it is sent only to the dashboard's address), or wait on an endpoint
without a timeout.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from queuey_core.settings import Settings

#: Addresses that mean "every interface": a process listening there is asked on loopback.
_ANY = {"", "0.0.0.0", "::", "[::]"}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one process answers ``/healthz``, and what to send it (a token)."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class Health:
    """The answer of :func:`probe`: healthy or not, why not, and who answered."""

    ok: bool
    reason: str
    endpoint: Endpoint | None = None


def _url(host: str, port: int) -> str:
    host = "127.0.0.1" if host in _ANY else host
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{port}/healthz"


def health_endpoints(settings: Settings) -> list[Endpoint]:
    """Where ``settings``' long-running processes answer ``/healthz``: the worker's and
    the scheduler's metrics ports (when set, and not 0: a port picked at random cannot
    be found), then the dashboard's address."""
    found: list[Endpoint] = []
    ports = {"worker": settings.worker.metrics_port, "scheduler": settings.scheduler.metrics_port}
    if ports["worker"] is not None and ports["worker"] == ports["scheduler"]:
        ports = {"worker or scheduler": ports["worker"]}
    for name, port in ports.items():
        if port:
            found.append(Endpoint(name, _url("127.0.0.1", port)))
    board = settings.dashboard
    token = board.token.get_secret_value() if board.token is not None else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    found.append(Endpoint("dashboard", _url(board.host, board.port), headers))
    return found


def _ask(endpoint: Endpoint, timeout: float) -> Health | None:
    """The endpoint's answer, or None when nothing listens there."""
    parts = urlsplit(endpoint.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/healthz", headers=endpoint.headers)
        response = conn.getresponse()
        body = response.read(64 * 1024)
    except ConnectionRefusedError:
        return None
    except TimeoutError:
        return Health(False, f"no answer within {timeout:g}s", endpoint)
    except OSError as exc:
        return Health(False, f"asking failed: {exc.strerror or exc}", endpoint)
    except http.client.HTTPException as exc:
        return Health(False, f"not an HTTP answer ({type(exc).__name__})", endpoint)
    finally:
        conn.close()
    if response.status == 200:
        return Health(True, "", endpoint)
    return Health(False, _reason(response.status, body), endpoint)


def _reason(status: int, body: bytes) -> str:
    """Why an answer is unhealthy: the check's own reason when it gives one."""
    try:
        reason = json.loads(body).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return str(reason) if reason else f"HTTP {status}"


def probe(endpoints: Sequence[Endpoint], *, timeout: float = 4.0) -> Health:
    """Ask each endpoint in turn for ``/healthz``; the first that answers decides.

    An endpoint where nothing listens is passed over; an answer other than 200, a
    timeout or a broken answer is unhealthy with its reason.
    """
    for endpoint in endpoints:
        answer = _ask(endpoint, timeout)
        if answer is not None:
            return answer
    asked = ", ".join(e.url for e in endpoints) or "nowhere"
    return Health(False, f"nothing answers on {asked}")
