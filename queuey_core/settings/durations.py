"""Durations as the configuration writes them (``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``,
``"1d"`` or a number of seconds), and the field types that read them."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from queuey_core.limits import check_delay, check_positive

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")


def duration(value: str | float) -> float:
    """``"500ms"`` / ``"30s"`` / ``"5m"`` / ``"2h"`` / ``"1d"`` or a number -> seconds.

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30s'")
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.fullmatch(value)
    if match:
        return float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return float(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a duration (write it like '500ms', '30s', '5m')"
        ) from None


def _duration_field(value: object) -> object:
    # Leaves other types to pydantic's own float validation and its message.
    if not isinstance(value, str | int | float):
        return value
    seconds = duration(value)
    if not math.isfinite(seconds):  # TOML has inf and nan; so has float("1e999")
        raise ValueError("must be a finite number of seconds")
    return seconds


def _timeout(value: float) -> float:
    return check_positive(value, "a timeout")


def _delay(value: float) -> float:
    if value == 0:
        raise ValueError("must be more than 0 seconds")
    return check_delay(value, "a delay")


#: A finite number of seconds, 0 allowed (a grace period, a recovery window).
Duration = Annotated[float, BeforeValidator(_duration_field), Field(ge=0)]
#: A finite number of seconds above 0.
Timeout = Annotated[float, BeforeValidator(_duration_field), AfterValidator(_timeout)]
#: A delay the broker's delay ladder can hold, above 0.
Delay = Annotated[float, BeforeValidator(_duration_field), AfterValidator(_delay)]
