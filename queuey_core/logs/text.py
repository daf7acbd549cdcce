"""Text made safe for a terminal or a log line: control characters escaped.

Text that came from a message, a handler or a user (job types, ids, reasons, queue
names, payloads, error messages quoting them) is shown literally, with control
characters escaped: a job type holding ``ESC[2J`` must not clear the terminal. Nothing
is cut short here (a header value that must also be short is truncated by the backends).
"""

from __future__ import annotations

import re

#: C0 and C1 controls and DEL; lone surrogates (undecodable bytes of argv, which cannot
#: be written out); line and paragraph separators; bidirectional overrides, which can
#: make text read differently from what it is.
_OTHERS = r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNPRINTABLE = re.compile(rf"[\x00-\x1f{_OTHERS}]")
_UNPRINTABLE_BUT_NEWLINE = re.compile(rf"[\x00-\x09\x0b-\x1f{_OTHERS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def escape_controls(text: object, *, newlines: bool = False) -> str:
    """``text`` safe for a terminal, on one line: control characters escaped.

    ESC becomes the four characters ``\\x1b``, a newline ``\\n`` (kept with
    ``newlines=True``, for tracebacks), U+202E ``\\u202e``. Backslashes are left alone,
    so a literal ``\\x1b`` in the input looks the same: the aim is a safe and readable
    line, not a reversible encoding (``--json`` output is that).
    """
    value = text if isinstance(text, str) else str(text)
    return (_UNPRINTABLE_BUT_NEWLINE if newlines else _UNPRINTABLE).sub(_escape, value)


def error_summary(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line, control characters escaped."""
    text = str(exc)
    return escape_controls(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
