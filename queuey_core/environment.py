"""``QUEUEY_*`` variables that set nothing: each is warned about by name, once.

pydantic-settings reads a variable only when its first part names a top-level setting
(``QUEUEY_BROKER__URL``: ``broker``, then ``url``) and silently ignores every other one
with the prefix. So ``QUEUEY_BROKER_URL``, one underscore short, left the default broker
in use without a word. (A typo below a known table, ``QUEUEY_BROKER__URLL``, is already
an error: the tables forbid unknown keys.)

Owns: the variables queuey reads outside the settings, and the warning with its "did
you mean" (difflib, against every variable the settings would read). Must never: log a
variable's value (``QUEUEY_BROKER__URL`` holds a password), or warn twice about one
variable in a process (settings are loaded more than once in some commands).
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

logger = logging.getLogger(__name__)

PREFIX = "QUEUEY_"
#: Variables queuey itself reads that are not settings: never warned about.
OTHER_VARIABLES = frozenset(
    {
        "QUEUEY_CONFIG",  # the config files (queuey_core.settings.find_config)
        "QUEUEY_LOG_LEVEL",  # the CLI's --log-level
        "QUEUEY_SUPERVISOR_PID",  # set by `queuey worker --processes` in its children
        "QUEUEY_CHILD_INDEX",
        "QUEUEY_MIGRATE_TO",  # `queuey migrate --to` (a broker URL, password and all)
    }
)
#: Prefixes of other variables queuey reads: the test suite's and the benchmark's own.
OTHER_PREFIXES = ("QUEUEY_TEST_", "QUEUEY_BENCH_")
#: How alike a variable and a setting must be to suggest it (difflib's ratio).
CUTOFF = 0.8

_warned: set[str] = set()
_lock = threading.Lock()


def setting_variables(
    model: type[BaseModel], tables: Mapping[str, Any] | None = None, *, prefix: str = PREFIX
) -> Iterator[str]:
    """Every variable that sets a key of ``model``: ``QUEUEY_BROKER``,
    ``QUEUEY_BROKER__URL``, ``QUEUEY_BROKER__TLS__CA_FILE``, ...

    A table of named entries (``queues``) has no fixed keys: its entries are taken from
    ``tables``, the configuration read so far (``QUEUEY_QUEUES__ALPHA__PREFETCH``).
    """
    for name, field in model.model_fields.items():
        variable = f"{prefix}{name.upper()}"
        yield variable
        data = (tables or {}).get(name)
        nested = _model_of(field.annotation)
        if nested is not None:
            yield from setting_variables(
                nested, data if isinstance(data, Mapping) else None, prefix=f"{variable}__"
            )
            continue
        entries = _entry_model_of(field.annotation)
        if entries is not None and isinstance(data, Mapping):
            for key, value in data.items():
                entry = f"{variable}__{str(key).upper()}"
                yield entry
                table = value if isinstance(value, Mapping) else None
                yield from setting_variables(entries, table, prefix=f"{entry}__")


def unknown_variables(
    model: type[BaseModel],
    environ: Mapping[str, str],
    tables: Mapping[str, Any] | None = None,
) -> list[tuple[str, str | None]]:
    """Each ``QUEUEY_*`` variable of ``environ`` that sets nothing, with the likely
    variable it was meant to be (or None), in name order.

    A variable sets something when its first part (up to ``__``) names a field of
    ``model``, as pydantic-settings reads it, whatever the letter case.
    """
    found: list[tuple[str, str | None]] = []
    candidates: list[str] | None = None
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in OTHER_VARIABLES:
            continue
        if upper.startswith(OTHER_PREFIXES):
            continue
        top = upper[len(PREFIX) :].split("__", 1)[0].lower()
        if top in model.model_fields:
            continue
        if candidates is None:
            candidates = [*setting_variables(model, tables), *sorted(OTHER_VARIABLES)]
        close = difflib.get_close_matches(upper, candidates, n=1, cutoff=CUTOFF)
        found.append((name, close[0] if close else None))
    return found


def warn_unknown_variables(
    model: type[BaseModel],
    tables: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Log a warning for each ``QUEUEY_*`` variable that sets nothing (the first time
    it is seen in this process), naming it and the close match; never its value."""
    for name, meant in unknown_variables(model, os.environ if environ is None else environ, tables):
        with _lock:
            if name in _warned:
                continue
            _warned.add(name)
        hint = f"; did you mean {meant}?" if meant else ""
        logger.warning(
            "environment variable %s matches no setting and is ignored%s",
            name,
            hint,
            extra={"variable": name, "did_you_mean": meant},
        )


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``BrokerSettings``), if it holds one."""
    for candidate in _members(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _entry_model_of(annotation: Any) -> type[BaseModel] | None:
    """The model of a table of named entries (``dict[str, QueueSettings]``)."""
    for candidate in _members(annotation):
        if typing.get_origin(candidate) is dict:
            args = typing.get_args(candidate)
            if len(args) == 2:
                return _model_of(args[1])
    return None


def _members(annotation: Any) -> tuple[Any, ...]:
    """``X | None`` and ``Optional[X]`` as their members; anything else as itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)
