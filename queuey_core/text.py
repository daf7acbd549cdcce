"""Text that is safe to put in a header, a log line or a listing, whatever it came from.

Owns: escaping untrusted text to printable ASCII (:func:`ascii_printable`,
:func:`ascii_error_text` for an exception), the preview
of a body that is not an envelope (:func:`body_preview`), and which message ids may
serve as a dead letter's handle (:func:`message_handle`); a duration in a few characters
(:func:`short_duration`, a worker's uptime). The command line's
``queuey_cli.output`` has its own escaping for a terminal (it keeps non-ASCII text);
these keep only ASCII, so that what they return encodes anywhere (AMQP headers too).
"""

from __future__ import annotations

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def ascii_printable(text: str, limit: int) -> str:
    """``text`` as printable ASCII of at most ``limit`` characters, for headers and listings.

    Anything else is escaped (``\\xNN``, ``\\uNNNN``), so the result encodes anywhere;
    a longer text is cut, and says so.
    """
    escaped = text.encode("ascii", "backslashreplace").decode("ascii").translate(_CONTROLS)
    if len(escaped) <= limit:
        return escaped
    return escaped[: max(0, limit - 3)] + "..."


def ascii_error_text(exc: BaseException, limit: int = 500) -> str:
    """``Type: message`` of any exception, as printable ASCII (for a header); never raises."""
    try:
        text = str(exc)
    except Exception:
        text = ""
    return ascii_printable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, limit)


def body_preview(body: bytes, limit: int = 120) -> str:
    """The start of a message body that is not an envelope, as printable ASCII."""
    head = bytes(body[: limit * 4]).decode("utf-8", "backslashreplace")
    suffix = f" ({len(body)} bytes)" if len(body) > limit else ""
    return ascii_printable(head, limit) + suffix


def message_handle(message_id: object) -> str | None:
    """A message id usable as a dead letter's handle, or None: printable ASCII, short.

    ``#`` starts position handles, so an id starting with it is not used either.
    """
    if (
        isinstance(message_id, str)
        and 0 < len(message_id) <= 255
        and message_id.isascii()
        and message_id.isprintable()
        and not message_id.startswith("#")
    ):
        return message_id
    return None


def short_duration(seconds: float) -> str:
    """``seconds`` in two units at most: ``45s``, ``3m07s``, ``2h05m``, ``4d03h``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
