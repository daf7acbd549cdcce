"""What every command needs: settings, handlers, a backend, and one way to fail."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer

from queuey_cli.output import Exit, err, error
from queuey_core.errors import ConfigError, QueueyError
from queuey_core.logs.text import escape_controls

if TYPE_CHECKING:
    from queuey_core.handlers import Discovered
    from queuey_core.queues import QueueSet
    from queuey_core.settings import Settings

# The settings, the handlers and the backend (pydantic, the job models, pika) are
# imported by the functions that use them: every command's ``--help`` goes without.

#: ``--json`` on every read command: one JSON document on stdout, nothing else there.
JsonOption = typer.Option("--json", help="One JSON document on stdout (fields: docs/scripting.md).")

#: Whether this process ends when the command does (the ``queuey`` console script), as
#: opposed to a caller that goes on (``CliRunner``, an application embedding the CLI).
_ends_with_command = False


def ending_with_command() -> None:
    """Say that this process ends when the command does (the console script only)."""
    global _ends_with_command  # noqa: PLW0603 - one flag, set once at start-up
    _ends_with_command = True


def ends_with_command() -> bool:
    """Whether this process ends when the command does."""
    return _ends_with_command


P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class State:
    """The global options, shared by every command through the Typer context."""

    config: list[Path] = field(default_factory=list)
    #: Job types of installed plugins whose queue the configuration does not declare,
    #: with why each cannot be used (filled by :meth:`handlers`).
    unusable: dict[str, str] = field(default_factory=dict)
    _warned: bool = False

    def settings(self, **overrides: Any) -> Settings:
        """The effective configuration (files, then QUEUEY_*, then ``overrides``)."""
        from queuey_core.settings import load_settings  # noqa: PLC0415 - see the imports

        settings, _ = load_settings(self.config or None, overrides=overrides or None)
        return settings

    def where(self) -> str:
        """The config files, for a message: ``a.toml + b.toml`` (or ``configuration``)."""
        from queuey_core.settings import find_config  # noqa: PLC0415 - see the imports

        return " + ".join(str(p) for p in find_config(self.config or None)) or "configuration"

    def handlers(self, queues: QueueSet) -> list[Discovered]:
        """The handlers plugins register for the configured queues. The others are left
        out, with one warning each per process: only a command that names one of them
        fails (see :attr:`unusable`)."""
        from queuey_core.handlers import discover, split_by_queue  # noqa: PLC0415

        found, self.unusable = split_by_queue(discover(), queues)
        if not self._warned:
            self._warned = True
            for why in self.unusable.values():
                warn(f"{why}: it can be neither enqueued nor run")
        return found


def warn(message: str) -> None:
    """One line on stderr: ``warning: <message>``, the message literal."""
    from rich.text import Text  # noqa: PLC0415  (as output.error: not for every command)

    err.print(
        Text.assemble(("warning:", "bold yellow"), " ", escape_controls(message)), highlight=False
    )


def state(ctx: typer.Context) -> State:
    """The State the root callback stored."""
    obj = ctx.find_root().obj
    if not isinstance(obj, State):  # a command invoked without the root callback
        obj = State()
        ctx.find_root().obj = obj
    return obj


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn queuey's errors into one line on stderr and a named exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            error(str(exc))
            raise typer.Exit(Exit.USAGE) from None
        except QueueyError as exc:
            error(str(exc))
            raise typer.Exit(Exit.FAILURE) from None

    return wrapper


def usage(message: str) -> typer.Exit:
    """Print a usage error and return the exit to raise."""
    error(message)
    return typer.Exit(Exit.USAGE)


def parse_json(text: str, where: str) -> Any:
    """``text`` decoded as JSON, or a usage error naming ``where``: a syntax error, and
    nesting too deep for the decoder (a hostile or broken input, not a crash)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise usage(f"{where}: invalid JSON: {exc}") from None
    except RecursionError:
        raise usage(f"{where}: invalid JSON: nested too deeply") from None


def backend(settings: Settings) -> Any:
    """The backend ``settings`` name (pika is imported only now, for an AMQP URL), with
    its dead letters in the job store when one is configured."""
    from queuey_core.backends.open import open_backend  # noqa: PLC0415 - see the imports
    from queuey_core.results.setup import with_dead_letter_store  # noqa: PLC0415

    return with_dead_letter_store(open_backend(settings.broker), settings)


def control_secret(settings: Settings) -> str | None:
    """``[control] secret``: what signs (``queuey workers``) and checks (``queuey worker``)
    control requests; None when unset."""
    secret = settings.control.secret
    return secret.get_secret_value() if secret is not None else None
