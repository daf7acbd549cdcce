"""The sections of the configuration: ``[broker]`` (with ``[broker.tls]``), ``[worker]``,
``[queues.NAME]`` (with its ``retry``), ``[schedules.NAME]`` and ``[scheduler]``.

Values are checked against what the broker can hold (:mod:`queuey_core.limits`) here,
where they come in.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from queuey_core.backends.sqlite.options import is_sqlite_url
from queuey_core.backends.sqlite.options import parse_url as parse_sqlite_url
from queuey_core.errors import ConfigError
from queuey_core.limits import MAX_PRIORITY, MAX_UINT16
from queuey_core.limits import MAX_PROCESSES as MAX_PROCESSES  # noqa: PLC0414 - its old home
from queuey_core.queues import QueueKind
from queuey_core.retry import Backoff, BackoffKind, RetryPolicy
from queuey_core.schedules.ticks import CatchUp, Cron, Every, Trigger
from queuey_core.settings.durations import Delay, Duration, Timeout
from queuey_core.urls import check_url, check_urls, split_urls

_BROKER_SCHEMES = ("amqp", "amqps")


def _url_list(value: object) -> object:
    # A TOML array of URLs (a cluster's nodes) is kept as the environment variable's
    # form, one string with the URLs separated by commas: one secret, one type.
    if isinstance(value, list | tuple):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("must be a URL or a list of URLs (strings)")
        if not value:
            raise ValueError("give at least one URL")
        for n, url in enumerate(value, 1):
            if not url.strip():
                raise ValueError(f"URL {n} of {len(value)} is empty")
        urls = [v.strip() for v in value]
        check_urls(urls, _BROKER_SCHEMES)  # each on its own, before joining them
        return ",".join(urls)
    return value


def _broker_url(value: SecretStr) -> SecretStr:
    text = value.get_secret_value()
    if is_sqlite_url(text):
        # The embedded backend: one file, chosen by its URL and never by accident.
        try:
            parse_sqlite_url(text)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value
    try:
        check_urls(split_urls(text), _BROKER_SCHEMES)
    except ValueError as exc:
        if "must start with" in str(exc):
            raise ValueError(f"{exc} (or sqlite:///path/to/queuey.db: no server)") from None
        raise
    return value


def _management_url(value: SecretStr | None) -> SecretStr | None:
    if value is not None:
        check_url(value.get_secret_value(), ("http", "https"))
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrySettings(_Section):
    """``retry = { max_attempts = 3, backoff = "exponential", initial = "1s", ... }``."""

    max_attempts: int = Field(default=3, ge=1)
    backoff: BackoffKind = BackoffKind.EXPONENTIAL
    initial: Delay = 1.0
    max: Delay = 600.0
    multiplier: float = Field(default=2.0, ge=1.0, allow_inf_nan=False)
    jitter: bool = True

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> RetrySettings:
        if self.max < self.initial:
            raise ValueError(f"max ({self.max:g}s) is below initial ({self.initial:g}s)")
        return self

    def policy(self) -> RetryPolicy:
        """The retry policy these settings describe."""
        backoff = Backoff(self.backoff, self.initial, self.max, self.multiplier, self.jitter)
        return RetryPolicy(self.max_attempts, backoff)


class QueueSettings(_Section):
    """One ``[queues.NAME]`` table."""

    # 0 would mean "no limit" to RabbitMQ: a worker would pull the whole queue.
    prefetch: int = Field(default=10, ge=1, le=MAX_UINT16)
    max_priority: int | None = Field(default=None, ge=1, le=MAX_PRIORITY)
    kind: QueueKind = QueueKind.CLASSIC
    job_timeout: Timeout | None = None
    # A cap of its own for the queue's async def jobs (default: the worker's).
    async_concurrency: int | None = Field(default=None, ge=1)
    retry: RetrySettings = RetrySettings()


class TLSSettings(_Section):
    """``[broker.tls]``: how an ``amqps://`` URL checks the broker, and who we are to it.

    ``ca_file``: the CA that signed the broker's certificate (default: the system's
    trusted CAs). ``cert_file`` and ``key_file``: our client certificate, for a broker
    that asks for one (``key_file`` may be left out when ``cert_file`` holds the key
    too). ``server_name``: the name the broker's certificate must be for (default: the
    URL's host). ``verify = false`` checks nothing (a test broker, never production).
    Paths are relative to the working directory; every file is checked at load.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = Field(default=None, min_length=1)
    verify: bool = True

    @field_validator("ca_file", "cert_file", "key_file", mode="after")
    @classmethod
    def _a_file(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        path = path.expanduser()
        if not path.exists():
            raise PydanticCustomError("tls_file", "no such file: {path}", {"path": str(path)})
        if not path.is_file():
            raise PydanticCustomError("tls_file", "not a file: {path}", {"path": str(path)})
        return path

    @model_validator(mode="after")
    def _loads(self) -> TLSSettings:
        if self.key_file is not None and self.cert_file is None:
            raise PydanticCustomError("tls", "key_file is set without cert_file", {})
        if self.ca_file is None and self.cert_file is None:
            return self  # nothing of ours to read
        try:
            self.context()
        except ConfigError as exc:
            raise PydanticCustomError("tls", "{problem}", {"problem": str(exc)}) from None
        return self

    def context(self) -> ssl.SSLContext:
        """The client's SSL context these settings describe.

        Raises:
            ConfigError: a file that is not what it should be (not PEM, a key that does
                not match its certificate, an encrypted key).
        """
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"ca_file {self.ca_file}: not a PEM CA certificate ({exc})") from None
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file is not None:
            key = self.key_file or self.cert_file
            try:
                # An encrypted key would prompt on the terminal: refuse it instead.
                ctx.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
            except _EncryptedKey:
                raise ConfigError(
                    f"key_file {key}: the key is encrypted; give it unencrypted"
                ) from None
            except ssl.SSLError as exc:
                if exc.reason == "KEY_VALUES_MISMATCH":
                    raise ConfigError(
                        f"cert_file {self.cert_file}: the key in {key} is not this "
                        "certificate's key"
                    ) from None
                raise ConfigError(
                    f"cert_file {self.cert_file}: not a PEM certificate, or no PEM key in {key} "
                    f"({exc})"
                ) from None
        return ctx


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey


class BrokerSettings(_Section):
    """``[broker]``: where RabbitMQ is. The URLs hold passwords: they are never printed.

    ``url`` is one URL, or for a cluster a list of them, one per node (a TOML array, or
    ``QUEUEY_BROKER__URL`` with the URLs separated by commas): :meth:`urls`. They must
    share a scheme and a virtual host.

    ``management_url`` (``http://host:15672`` or ``https://host:15671``) is where
    ``queuey queues`` asks for unacked counts; without it they are not shown. It is
    never guessed from ``url``: that would send the broker's credentials over plain
    HTTP, even for an ``amqps://`` broker.
    """

    url: Annotated[SecretStr, BeforeValidator(_url_list), AfterValidator(_broker_url)] = SecretStr(
        "amqp://guest:guest@127.0.0.1:5672/%2F"
    )
    management_url: Annotated[SecretStr | None, AfterValidator(_management_url)] = None
    heartbeat: int = Field(default=30, ge=0, le=MAX_UINT16)
    connect_timeout: Timeout = 5.0
    recovery_timeout: Duration = 60.0
    publish_timeout: Duration = 30.0
    tls: TLSSettings = TLSSettings()

    @model_validator(mode="after")
    def _tls_needs_amqps(self) -> BrokerSettings:
        if self.tls.model_fields_set and not self.uses_tls():
            raise PydanticCustomError(
                "tls_without_amqps",
                "tls is set but the URL is not amqps://: use amqps:// or drop the tls keys",
                {},
            )
        return self

    def urls(self) -> list[str]:
        """The broker's URLs: one, or one per node of a cluster."""
        if self.is_embedded():
            return [self.url.get_secret_value().strip()]
        return split_urls(self.url.get_secret_value())

    def is_embedded(self) -> bool:
        """Whether the URL names the embedded backend (``sqlite:///path``), no server."""
        return is_sqlite_url(self.url.get_secret_value())

    def uses_tls(self) -> bool:
        """Whether the URL is ``amqps://`` (every URL of a list has the same scheme)."""
        return self.url.get_secret_value().lower().startswith("amqps:")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The SSL context for ``RabbitMQBackend(ssl_context=...)``: None on ``amqp://``."""
        return self.tls.context() if self.uses_tls() else None


class WorkerSettings(_Section):
    """``[worker]``."""

    concurrency: int | None = Field(default=None, ge=1)
    # async def jobs at once, for queues without a cap of their own (default: concurrency).
    async_concurrency: int | None = Field(default=None, ge=1)
    job_timeout: Timeout | None = 300.0
    shutdown_timeout: Timeout = 25.0
    timeout_grace: Duration = 10.0
    # /metrics, /healthz and /readyz on this port (every interface); off when unset.
    metrics_port: int | None = Field(default=None, ge=0, le=MAX_UINT16)
    # Worker processes under one supervisor (1: no supervisor). Capped: each process
    # holds its own connections and threads, and a typo of 1000 should not fork-bomb.
    processes: int = Field(default=1, ge=1, le=MAX_PROCESSES)
    # Replace a process after it ran this many jobs (for handlers that leak); off unset.
    max_jobs_per_child: int | None = Field(default=None, ge=1)


class ScheduleSettings(_Section):
    """One ``[schedules.NAME]`` table: a job fired on a cron, or every so often.

    The payload is checked against the job's model where handlers are known
    (:func:`queuey_core.schedules.build_schedules`), before any scheduler starts.
    """

    job: str = Field(min_length=1)
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: int | None = Field(default=None, ge=0, le=255)
    cron: str | None = None
    every: Duration | None = None
    timezone: str | None = None
    catch_up: CatchUp = CatchUp.LATEST

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleSettings:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give either cron or every, not both and not neither")
        if self.every is not None and self.timezone is not None:
            raise ValueError("timezone applies to cron only (every is aligned to UTC)")
        self.trigger()  # a bad cron, interval or time zone is reported now
        return self

    def trigger(self) -> Trigger:
        """When this schedule's ticks fall."""
        if self.cron is not None:
            return Cron(self.cron, self.timezone or "UTC")
        assert self.every is not None
        return Every(self.every)


class SchedulerSettings(_Section):
    """``[scheduler]``: how schedulers elect the one that fires, and when a tick is late."""

    heartbeat: int = Field(default=2, ge=1)
    grace: Duration = 10.0
    # `queuey scheduler` serves /metrics, /healthz and /readyz on this port; off when unset.
    metrics_port: int | None = Field(default=None, ge=0, le=MAX_UINT16)


def _control_secret(value: SecretStr | None) -> SecretStr | None:
    # The library's own minimum (queuey_core.control.signing.MIN_SECRET), said here.
    if value is not None and len(value.get_secret_value().encode()) < 16:
        raise ValueError("at least 16 characters: a short secret can be guessed")
    return value


class ControlSettings(_Section):
    """``[control]``: the control channel (``queuey workers``; docs/operations.md)."""

    # Sign every request with it (HMAC-SHA256), and refuse unsigned ones: publishing
    # rights on the broker alone then cannot drain the fleet. Off when unset.
    secret: Annotated[SecretStr | None, AfterValidator(_control_secret)] = None
