"""Runtime configuration: ``queuey.toml``, overridden by ``QUEUEY_*``, overridden by code.

The file is found at the path given (``--config``, repeatable: later files are overlays
merged over earlier ones), else ``$QUEUEY_CONFIG`` (several joined with ``:``), else
``./queuey.toml``; without one, the defaults apply. Nested keys come from the
environment with ``__``: ``QUEUEY_QUEUES__ALPHA__PREFETCH=8`` (a ``QUEUEY_*`` variable that
sets nothing is warned about: :mod:`queuey_core.environment`). Durations are written as
``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"1d"`` (or a number of seconds).

Values are checked against what the broker can hold (:mod:`queuey_core.limits`) here,
where they come in: a retry delay beyond the delay ladder or a prefetch of 0 is a
``ConfigError`` at start-up, not a worker that fails on its first retry.
"""

from __future__ import annotations

from queuey_core.settings.dashboard import DashboardSettings
from queuey_core.settings.durations import Delay, Duration, Timeout, duration
from queuey_core.settings.loading import Settings, find_config, load_settings
from queuey_core.settings.results import NO_STORE, ResultsSettings
from queuey_core.settings.sections import (
    MAX_PROCESSES,
    BrokerSettings,
    ControlSettings,
    QueueSettings,
    RetrySettings,
    SchedulerSettings,
    ScheduleSettings,
    TLSSettings,
    WorkerSettings,
)

__all__ = [
    "MAX_PROCESSES",
    "NO_STORE",
    "BrokerSettings",
    "ControlSettings",
    "DashboardSettings",
    "Delay",
    "Duration",
    "QueueSettings",
    "ResultsSettings",
    "RetrySettings",
    "ScheduleSettings",
    "SchedulerSettings",
    "Settings",
    "TLSSettings",
    "Timeout",
    "WorkerSettings",
    "duration",
    "find_config",
    "load_settings",
]
