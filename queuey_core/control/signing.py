"""Signed control requests: HMAC-SHA256 over the request and its time, with a shared secret.

With ``[control] secret`` set, ``queuey workers`` (any asker given the secret) wraps each
request in a signed envelope, and a worker given the secret refuses every request that is
not signed with it, is older (or newer) than :data:`MAX_SKEW` seconds, or was seen
before: publishing rights on the broker alone no longer let anyone drain the fleet. The
envelope is JSON::

    {"signed": 1, "ts": 1764640000000, "nonce": "9f...", "body": "{...request...}",
     "sig": "hex HMAC-SHA256(secret, 'queuey-control-v1' NUL ts NUL nonce NUL body)"}

The body travels as the exact string that was signed, so nothing is re-serialised before
checking. Only requests are signed: a reply says what a worker is doing, and a forged one
can only mislead the asker (see docs/operations.md for what this does not protect).

Owns: the envelope, the check and the memory of signatures seen. Must never: compare
signatures with ``==`` (timing), keep more than :data:`MAX_SEEN` signatures, or print the
secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections import OrderedDict
from typing import Any

from queuey_core.control.documents import MAX_DOCUMENT
from queuey_core.errors import DecodeError

#: Seconds a signed request stays valid either side of the worker's clock: long enough
#: for clocks a little apart and a busy broker, short enough to make a replay useless.
MAX_SKEW = 60.0
#: Signatures remembered (each for MAX_SKEW), to refuse a request replayed in its window.
MAX_SEEN = 100_000
#: The shortest secret accepted, in bytes.
MIN_SECRET = 16

_DOMAIN = b"queuey-control-v1"


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(key) < MIN_SECRET:
        raise ValueError(f"the control secret must be at least {MIN_SECRET} bytes long")
    return key


def _mac(key: bytes, ts: int, nonce: str, body: str) -> str:
    message = b"\0".join((_DOMAIN, str(ts).encode(), nonce.encode(), body.encode()))
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def is_signed(wire: bytes) -> bool:
    """Whether ``wire`` looks like a signed envelope (checked or not)."""
    return wire.lstrip()[:12].startswith(b'{"signed":')


def sign(body: bytes, secret: str | bytes, *, now_ms: int) -> bytes:
    """``body`` (a request) wrapped in an envelope signed with ``secret`` at ``now_ms``.

    Raises:
        ValueError: the secret is shorter than :data:`MIN_SECRET` bytes.
    """
    key = _key(secret)
    text = body.decode()
    nonce = secrets.token_hex(8)
    envelope = {"signed": 1, "ts": now_ms, "nonce": nonce, "body": text}
    envelope["sig"] = _mac(key, now_ms, nonce, text)
    return json.dumps(envelope, separators=(",", ":")).encode()


def unwrap(wire: bytes) -> bytes:
    """The request inside a signed envelope, unchecked (for a worker without a secret:
    it accepts unsigned requests anyway), or ``wire`` itself when it is not signed.

    Raises:
        DecodeError: a signed envelope that does not parse.
    """
    if not is_signed(wire):
        return wire
    return str(_parse(wire)["body"]).encode()


class Verifier:
    """Checks signed requests against one secret, and remembers the signatures seen.

    Not thread-safe: a worker's requests come one at a time, on its control thread.
    """

    def __init__(self, secret: str | bytes, *, max_skew: float = MAX_SKEW) -> None:
        self._key = _key(secret)
        self._skew_ms = int(max_skew * 1000)
        self._seen: OrderedDict[str, int] = OrderedDict()

    def __repr__(self) -> str:
        return "Verifier(secret=***)"

    def verify(self, wire: bytes, *, now_ms: int) -> bytes:
        """The request inside ``wire`` once its signature, age and novelty are checked.

        Raises:
            DecodeError: unsigned, badly signed, stale, from the future, or replayed; the
                message says which (never the secret, nor the expected signature).
        """
        if not is_signed(wire):
            raise DecodeError("not signed")
        try:
            envelope = _parse(wire)
        except DecodeError as exc:
            raise DecodeError(f"a signed envelope that does not parse ({exc})") from None
        ts, nonce, body, sig = (envelope[k] for k in ("ts", "nonce", "body", "sig"))
        expected = _mac(self._key, ts, nonce, body)
        if not hmac.compare_digest(expected, sig):
            raise DecodeError("bad signature")
        if abs(now_ms - ts) > self._skew_ms:
            raise DecodeError(f"signed {(now_ms - ts) / 1000:+.0f}s away from now")
        self._forget(now_ms)
        if sig in self._seen:
            raise DecodeError("replayed")
        if len(self._seen) >= MAX_SEEN:
            self._seen.popitem(last=False)
        self._seen[sig] = ts
        return str(body).encode()

    def _forget(self, now_ms: int) -> None:
        """Drop the signatures that are out of their window anyway (oldest first, as
        requests mostly arrive in order; a straggler is dropped by MAX_SEEN)."""
        while self._seen:
            oldest = next(iter(self._seen.values()))
            if now_ms - oldest <= self._skew_ms:
                return
            self._seen.popitem(last=False)


def _parse(wire: bytes) -> dict[str, Any]:
    if len(wire) > MAX_DOCUMENT:
        raise DecodeError(f"{len(wire)} bytes, more than {MAX_DOCUMENT}")
    try:
        data = json.loads(wire)
    except ValueError:
        raise DecodeError("not JSON") from None
    if not (
        isinstance(data, dict)
        and data.get("signed") == 1
        and isinstance(data.get("ts"), int)
        and isinstance(data.get("nonce"), str)
        and len(data["nonce"]) <= 64
        and isinstance(data.get("body"), str)
        and isinstance(data.get("sig"), str)
        and len(data["sig"]) <= 128
    ):
        raise DecodeError("a signed envelope needs signed=1, ts, nonce, body and sig")
    return data
