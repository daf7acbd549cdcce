"""A handler's result as the job store keeps it: JSON text, within a size limit.

Owns: :func:`encode_result` and the default limit. It runs on the job's thread for every
result a recording worker keeps, so it reuses one C encoder instead of making one a call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

#: Default largest result kept, in bytes of JSON (``[results] max_result_size``).
DEFAULT_MAX_RESULT_SIZE = 64 * 1024

# One encoder for every result: json.dumps with options makes a new one each call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder JSONEncoder.encode makes anew on every call, made once: a result is
# encoded on the job's thread. No circular-reference check (markers None): a cycle is a
# RecursionError, refused like any value that is not JSON. None where there is no C
# accelerator: _ENCODE then.
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
_C_ENCODER = (
    None
    if _make_encoder is None
    else _make_encoder(
        None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def encode_result(value: object, limit: int) -> tuple[str | None, str]:
    """``value`` as JSON text, or None and why it is not kept (too large, not JSON)."""
    try:
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        elif _C_ENCODER is not None and type(value) in (dict, list):
            text = "".join(_C_ENCODER(value, 0))
        else:
            text = _ENCODE(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"result not kept: not JSON ({type(exc).__name__}: {exc})"
    # A character is 4 bytes of UTF-8 at most: a short text needs no encoding to tell.
    size = len(text) if len(text) * 4 <= limit else len(text.encode("utf-8"))
    if size > limit:
        return None, (
            f"result not kept: {size} bytes is over the limit of {limit} bytes "
            "([results] max_result_size)"
        )
    return text, ""
