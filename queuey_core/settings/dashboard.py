"""The ``[dashboard]`` section: where ``queuey dashboard`` listens, and its token.

The dashboard listens on the loopback address unless told otherwise, and refuses any
other address without a ``token`` (``queuey_dashboard.security``): a browser gives it
as the password of the HTTP Basic prompt, a script as ``Authorization: Bearer``. The
token is a secret: never printed, never shown on a page.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr

from queuey_core.limits import MAX_UINT16
from queuey_core.settings.durations import Duration

#: The shortest token accepted: a short one can be guessed over the network.
MIN_TOKEN = 16


def _token(value: SecretStr | None) -> SecretStr | None:
    if value is not None and len(value.get_secret_value().encode()) < MIN_TOKEN:
        raise ValueError(f"at least {MIN_TOKEN} characters: a short token can be guessed")
    return value


class DashboardSettings(BaseModel):
    """``[dashboard]``: ``queuey dashboard`` (docs/dashboard.md)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8180, ge=0, le=MAX_UINT16)
    # Required for any address but the loopback one; asked of every request when set.
    token: Annotated[SecretStr | None, AfterValidator(_token)] = None
    # Hide every button and refuse every write (403).
    read_only: bool = False
    # How often the open pages refresh themselves.
    refresh: Duration = Field(default=2.0, ge=0.5)
