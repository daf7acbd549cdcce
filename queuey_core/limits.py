"""The hard limits of the broker and the wire, in one place, and checks against them.

A value beyond one of these does not fail where it is written but later, inside a
worker or a backend, where nobody is there to correct it: a delay longer than the
ladder fails the settle of a retry, and the broker keeps redelivering the message.
So every way in (the configuration, the command line, ``Deferred``, the producer)
checks against these before anything is sent.
"""

from __future__ import annotations

import math

#: Seconds to gather the replies of live workers (``queuey workers``): a live worker
#: answers within milliseconds. Here, not in :mod:`queuey_core.control`, so that the
#: command line's help can show it without importing the control plane (pydantic).
CONTROL_REPLY_WINDOW = 1.0

#: Levels of the delay ladder: level ``k`` holds a message for ``2**k`` ms.
DELAY_LEVELS = 36
#: The longest delay the ladder holds, in ms (about 795 days).
MAX_DELAY_MS = 2**DELAY_LEVELS - 1
#: The same, in seconds.
MAX_DELAY_SECONDS = MAX_DELAY_MS / 1000
#: RabbitMQ accepts ``x-max-priority`` from 1 to 255.
MAX_PRIORITY = 255
#: An AMQP short string (queue names, routing keys, the ``type`` property) is at most
#: this many bytes of UTF-8.
MAX_SHORT_STRING_BYTES = 255
#: A delayed message's routing key spells its delay in bits (``0.1.…``, two bytes a
#: level) before its queue's name, and must stay a short string.
MAX_QUEUE_NAME_BYTES = MAX_SHORT_STRING_BYTES - 2 * DELAY_LEVELS
#: AMQP sends prefetch counts and heartbeats as unsigned 16-bit numbers.
MAX_UINT16 = 65_535


def check_delay(seconds: float, what: str = "a delay") -> float:
    """``seconds`` as a float if the delay ladder can hold it.

    Args:
        seconds: the delay.
        what: how the message names it, e.g. ``"--delay"`` or ``"a deferral's delay"``.

    Raises:
        ValueError: a negative, NaN, infinite or too long delay (or not a number).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    value = float(seconds)
    if math.isnan(value):
        raise ValueError(f"{what} is not a number (NaN)")
    if math.isinf(value):
        raise ValueError(f"{what} must be finite")
    if value < 0:
        raise ValueError(f"{what} cannot be negative")
    # Compared as the ladder will round it (up, to whole milliseconds).
    if math.ceil(value * 1000) > MAX_DELAY_MS:
        raise ValueError(
            f"{what} of {_human(value)} is longer than the broker can hold "
            f"(at most {MAX_DELAY_SECONDS:.3f}s, about {MAX_DELAY_MS // 86_400_000} days)"
        )
    return value


def _human(seconds: float) -> str:
    return f"{seconds / 86_400:.6g} days" if seconds >= 86_400 else f"{seconds:g}s"


def check_positive(seconds: float, what: str) -> float:
    """``seconds`` as a float if it is a finite number above 0 (a timeout, say).

    Raises:
        ValueError: zero, negative, NaN or infinite (or not a number).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    value = float(seconds)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number of seconds")
    if value <= 0:
        raise ValueError(f"{what} must be more than 0 seconds")
    return value


#: The most worker processes one supervisor runs (``[worker] processes``; the command
#: line's ``--help`` reads it without loading the settings).
MAX_PROCESSES = 64
