"""Loading the configuration: the files (``--config``, ``$QUEUEY_CONFIG`` or
``./queuey.toml``, overlays merged), then ``QUEUEY_*``, then overrides in code; and one
line that names the file or variable, the key and the problem when a value does not fit.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from queuey_core.environment import warn_unknown_variables
from queuey_core.errors import ConfigError
from queuey_core.flow.unique_settings import UniqueSettings
from queuey_core.queues import QueueConfig, QueueSet
from queuey_core.settings.dashboard import DashboardSettings
from queuey_core.settings.limits import LimitSettings
from queuey_core.settings.results import ResultsSettings
from queuey_core.settings.sections import (
    BrokerSettings,
    ControlSettings,
    QueueSettings,
    SchedulerSettings,
    ScheduleSettings,
    WorkerSettings,
)
from queuey_core.urls import redact

_toml_data: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toml", default=None
)


class _TomlSource(PydanticBaseSettingsSource):
    """The parsed file, ranked below the environment and the explicit overrides."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return (_toml_data.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_toml_data.get() or {})


class Settings(BaseSettings):
    """Everything queuey reads at start-up. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="QUEUEY_", env_nested_delimiter="__", extra="forbid"
    )

    broker: BrokerSettings = BrokerSettings()
    worker: WorkerSettings = WorkerSettings()
    queues: dict[str, QueueSettings] = Field(default_factory=lambda: {"default": QueueSettings()})
    scheduler: SchedulerSettings = SchedulerSettings()
    schedules: dict[str, ScheduleSettings] = Field(default_factory=dict)
    control: ControlSettings = ControlSettings()
    dashboard: DashboardSettings = DashboardSettings()
    results: ResultsSettings = ResultsSettings()
    unique: dict[str, UniqueSettings] = Field(default_factory=dict)
    limits: dict[str, LimitSettings] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Overrides first, then ``QUEUEY_*``, then the TOML file."""
        return init_settings, env_settings, _TomlSource(settings_cls)

    def queue_set(self) -> QueueSet:
        """The queues, as the library takes them."""
        return QueueSet(
            QueueConfig(
                name,
                prefetch=q.prefetch,
                max_priority=q.max_priority,
                retry=q.retry.policy(),
                kind=q.kind,
                job_timeout=q.job_timeout,
                async_concurrency=q.async_concurrency,
            )
            for name, q in self.queues.items()
        )

    def redacted(self) -> dict[str, Any]:
        """The effective settings as plain data, the passwords replaced."""
        data = self.model_dump(mode="json")
        # A sqlite:// URL holds no secret (and no host for redact() to anchor on).
        urls = (
            self.broker.urls()
            if self.broker.is_embedded()
            else [redact(url) for url in self.broker.urls()]
        )
        data["broker"]["url"] = urls[0] if len(urls) == 1 else urls
        management = self.broker.management_url
        data["broker"]["management_url"] = (
            redact(management.get_secret_value()) if management is not None else None
        )
        store = self.results.url
        data["results"]["url"] = redact(store.get_secret_value()) if store is not None else None
        return data


def find_config(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None,
) -> list[Path]:
    """The config files to read, base first: ``paths``, else ``$QUEUEY_CONFIG`` (several
    separated by ``os.pathsep``), else ./queuey.toml if it exists."""
    if paths is not None and not isinstance(paths, str | os.PathLike):
        chosen = [Path(p) for p in paths]
        if chosen:
            return chosen
    elif paths is not None:
        return [Path(paths)]
    env = os.environ.get("QUEUEY_CONFIG")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    default = Path("queuey.toml")
    return [default] if default.is_file() else []


def _named_by_env(paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None) -> bool:
    """Whether :func:`find_config` took the files from ``$QUEUEY_CONFIG``."""
    given = isinstance(paths, str | os.PathLike) or bool(paths)
    return not given and bool(os.environ.get("QUEUEY_CONFIG"))


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` on top of ``base``, table by table."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_settings(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[Settings, list[Path]]:
    """Read the configuration; returns it with the files it came from.

    Several files are overlays: each one's tables are merged over the ones before it
    (``queuey.toml`` then ``config/development.toml``, say).

    Raises:
        ConfigError: a missing or unreadable file, bad TOML, an unknown key, or a value
            that does not fit; the message names the file, the key and the problem.
    """
    sources = find_config(paths)
    data: dict[str, Any] = {}
    for source in sources:
        try:
            data = _merge(data, _read(source))
        except ConfigError as exc:
            if not _named_by_env(paths):
                raise
            raise ConfigError(f"QUEUEY_CONFIG: {exc}") from None
    where = " + ".join(str(s) for s in sources) or "configuration"
    # Before validating: a typo (QUEUEY_BROKER_URL) may be why what follows fails.
    warn_unknown_variables(Settings, data)
    token = _toml_data.set(data)
    try:
        settings = Settings(**dict(overrides or {}))
        settings.queue_set()  # a queue name or policy the library refuses, reported now
    except ValidationError as exc:
        raise ConfigError(_describe(exc, where)) from None
    except SettingsError as exc:
        raise ConfigError(_describe_env_error(exc)) from None
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    finally:
        _toml_data.reset(token)
    return settings, sources


_ENV_PREFIX = "QUEUEY_"


def _env_keys() -> dict[tuple[str, ...], str]:
    """Each ``QUEUEY_*`` variable set, by the key path it sets (lower case, as read)."""
    return {
        tuple(name[len(_ENV_PREFIX) :].lower().split("__")): name
        for name in os.environ
        if name.upper().startswith(_ENV_PREFIX)
    }


def _origin(loc: tuple[str, ...], env: dict[tuple[str, ...], str]) -> str | None:
    """The variable that set the key at ``loc`` (or a table holding it), if one did."""
    for path, name in env.items():
        n = min(len(path), len(loc))
        if path[:n] == loc[:n]:
            return name
    return None


def _describe(exc: ValidationError, where: str) -> str:
    """One line: each problem with its key, after the file or variable it came from."""
    env = _env_keys()
    by_origin: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False, include_input=False):
        loc = tuple(str(p).lower() for p in error["loc"])
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problem = "unknown key"
        else:
            problem = error["msg"].removeprefix("Value error, ")
        by_origin.setdefault(_origin(loc, env) or where, []).append(f"{key}: {problem}")
    return "; ".join(f"{origin}: {'; '.join(parts)}" for origin, parts in by_origin.items())


def _describe_env_error(exc: SettingsError) -> str:
    """pydantic-settings could not parse a variable (a table given as bad JSON)."""
    match = re.search(r'field "([^"]+)"', str(exc))
    field = match.group(1).lower() if match else ""
    env = _env_keys()
    names = [name for path, name in env.items() if path[0] == field]
    top = env.get((field,))
    if top is not None and not _is_json(os.environ.get(top, "")):
        culprits = [top]
    else:
        culprits = [name for name in names if not _is_json(os.environ.get(name, ""))] or names
    variable = " or ".join(sorted(culprits)) or f"{_ENV_PREFIX}{field.upper()}"
    return (
        f"{variable}: not valid JSON (a table is set as a JSON object, or key by key "
        f"as {_ENV_PREFIX}{field.upper() or 'TABLE'}__KEY=value)"
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
