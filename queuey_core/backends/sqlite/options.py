"""What a ``sqlite:///path`` URL says: the file, and how leases, polling and locks behave.

Owns: parsing the URL and its query (``lease``, ``poll``, ``busy_timeout``,
``synchronous``). Must never: touch the file (that is :mod:`.database`'s duty), or
accept an option it does not know (a typo would silently keep a default).
"""

from __future__ import annotations

import math
import urllib.parse
from dataclasses import dataclass

from queuey_core.errors import ConfigError

#: Seconds a claimed job stays leased without a renewal: a killed worker's jobs are
#: claimable again after at most this long.
DEFAULT_LEASE = 5.0
#: Seconds an idle worker waits between looks at the file for other processes' work.
DEFAULT_POLL = 0.05
#: Seconds a statement waits for another process's write lock before failing.
DEFAULT_BUSY_TIMEOUT = 5.0

_SYNCHRONOUS = ("normal", "full")


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """A parsed ``sqlite://`` URL. See docs/embedded.md for what each option does."""

    path: str
    lease: float = DEFAULT_LEASE
    poll: float = DEFAULT_POLL
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    synchronous: str = "normal"

    @property
    def url(self) -> str:
        """The URL again, with every option spelled out (for ``config show``)."""
        query = urllib.parse.urlencode(
            {
                "lease": _num(self.lease),
                "poll": _num(self.poll),
                "busy_timeout": _num(self.busy_timeout),
                "synchronous": self.synchronous,
            }
        )
        return f"sqlite:///{self.path}?{query}"


def _num(value: float) -> str:
    return f"{value:g}"


def is_sqlite_url(url: str) -> bool:
    """Whether ``url`` names the embedded backend (``sqlite:``, any case)."""
    return url.strip().lower().startswith("sqlite:")


def parse_url(url: str) -> SqliteOptions:
    """The options of ``sqlite:///relative/path`` or ``sqlite:////absolute/path``.

    As SQLAlchemy spells them: three slashes then a relative path, four for an
    absolute one.

    Raises:
        ConfigError: not a ``sqlite://`` URL, no path, or an unknown or bad option.
    """
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme.lower() != "sqlite":
        raise ConfigError(f"not a sqlite:// URL: {parts.scheme or 'no scheme'}")
    if parts.netloc:
        raise ConfigError(
            "a sqlite URL has no host: sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = urllib.parse.unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    if not path or path.endswith("/"):
        raise ConfigError("a sqlite URL names a file: sqlite:///queuey.db")
    if path == ":memory:":
        raise ConfigError("sqlite:///:memory: cannot be shared by processes: name a file")
    values: dict[str, float] = {}
    synchronous = "normal"
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key == "synchronous":
            if value.lower() not in _SYNCHRONOUS:
                raise ConfigError(f"sqlite URL: synchronous must be one of {_SYNCHRONOUS}")
            synchronous = value.lower()
        elif key in ("lease", "poll", "busy_timeout"):
            values[key] = _seconds(key, value)
        else:
            raise ConfigError(
                f"sqlite URL: unknown option {key!r} (known: lease, poll, busy_timeout, "
                "synchronous)"
            )
    options = SqliteOptions(path=path, synchronous=synchronous, **values)
    if options.lease < 1.0:
        raise ConfigError("sqlite URL: lease must be at least 1 second")
    if not 0.005 <= options.poll <= 1.0:
        raise ConfigError("sqlite URL: poll must be between 0.005 and 1 second")
    return options


def _seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"sqlite URL: {key}={value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"sqlite URL: {key} must be a positive number of seconds")
    return seconds
