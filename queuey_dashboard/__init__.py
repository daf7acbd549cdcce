"""The queuey web dashboard (``pip install 'queuey[dashboard]'``): queues, live workers,
dead letters, schedules and job history in a browser.

A small Starlette application over the same capabilities the command line uses;
Jinja templates with autoescape; htmx vendored as a static file (no network at run
time). Safe by default: loopback only without a token, a CSRF token on every write,
everything a message or a handler wrote shown as text. See ``docs/dashboard.md``.

* :func:`create_app`: the ASGI app, to mount in an application of yours;
* :func:`run_dashboard`: serve it with uvicorn (``queuey dashboard``).
"""

from __future__ import annotations

from queuey_dashboard.app import create_app
from queuey_dashboard.server import run_dashboard

__all__ = ["create_app", "run_dashboard"]
