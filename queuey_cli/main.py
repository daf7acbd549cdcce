"""The root ``queuey`` app: global options, logging, and the command groups."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast

import typer
import typer.main
import typer.models
from typer.core import TyperGroup

import queuey_core
from queuey_cli import coercion, completion, worker
from queuey_cli.common import State, ending_with_command
from queuey_cli.output import Exit, LogFormat, error, flush_logs, out, setup_logging

#: The other commands, by name: (module, attribute: a command function or a Typer app),
#: in the order the help lists them (Typer's: commands, then groups). Each module is
#: imported when its command runs (or help or completion lists them): `queuey worker`
#: loads none of them.
_LAZY: dict[str, tuple[str, str]] = {
    "enqueue": ("queuey_cli.enqueue", "enqueue"),
    "job": ("queuey_cli.jobs", "job"),
    "jobs": ("queuey_cli.jobs", "jobs"),
    "cancel": ("queuey_cli.jobs", "cancel"),
    "queues": ("queuey_cli.queues", "app"),
    "limits": ("queuey_cli.limits", "limits"),
    "unique": ("queuey_cli.unique", "app"),
    "handlers": ("queuey_cli.handlers", "handlers"),
    "scheduler": ("queuey_cli.scheduler", "scheduler"),
    "schema": ("queuey_cli.schema", "schema"),
    "dlq": ("queuey_cli.dlq", "app"),
    "config": ("queuey_cli.config", "app"),
    "schedules": ("queuey_cli.scheduler", "schedules_app"),
    "workers": ("queuey_cli.workers", "app"),
    "migrate": ("queuey_cli.migrate", "migrate"),
    "dashboard": ("queuey_cli.dashboard", "dashboard"),
    "health": ("queuey_cli.health", "health"),
    "init": ("queuey_cli.init", "init"),
    "workflow": ("queuey_cli.workflow", "app"),
}

#: Commands whose Click command is a class of their own: (module, class).
_CLASSES: dict[str, tuple[str, str]] = {
    "enqueue": ("queuey_cli.enqueue_args", "EnqueueCommand"),
}


def _load(name: str) -> typer.core.TyperCommand | TyperGroup:
    """The Click command ``name``, built as ``app.command`` or ``app.add_typer`` would."""
    module, attribute = _LAZY[name]
    found = getattr(importlib.import_module(module), attribute)
    command: typer.core.TyperCommand | TyperGroup
    if isinstance(found, typer.Typer):
        command = typer.main.get_group_from_info(
            typer.models.TyperInfo(found, name=name),
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=app.suggest_commands,
            rich_markup_mode=app.rich_markup_mode,
        )
    else:
        cls = None
        if name in _CLASSES:
            module, attribute = _CLASSES[name]
            cls = getattr(importlib.import_module(module), attribute)
        built = typer.main.get_command_from_info(
            typer.models.CommandInfo(name=name, callback=found, cls=cls),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
        assert isinstance(built, typer.core.TyperCommand)
        command = built
    coercion.install(command)
    return command


class _Commands(MutableMapping[str, Any]):
    """The root's commands: those built already, and the lazy ones, built on first use.

    Looking one up (running it) builds that one; listing them all (help, completion,
    a suggestion for a mistyped name) has every name at once and builds them as it goes.
    """

    def __init__(self, built: Mapping[str, Any]) -> None:
        self._built = dict(built)
        self._order = [*built, *(n for n in _LAZY if n not in built)]

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in _LAZY:
                raise KeyError(name)
            self._built[name] = _load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._order:
            self._order.append(name)

    def __delitem__(self, name: str) -> None:
        self[name]  # a lazy name must exist to be deleted
        del self._built[name]
        self._order.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)


class _OneLineErrors(TyperGroup):
    """The root command: a usage error (unknown command, missing or bad option value) is
    one ``error:`` line and exit 2, like queuey's own errors, instead of Typer's usage
    box. Both the console script and ``CliRunner`` come through here.

    Its commands but ``worker`` are built on first use (:data:`_LAZY`)."""

    def __init__(self, *args: Any, commands: Any = None, **kwargs: Any) -> None:
        for command in (commands or {}).values():
            coercion.install(command)
        lazy = cast(dict[str, Any], _Commands(commands or {}))  # Click reads it as a mapping
        super().__init__(*args, commands=lazy, **kwargs)
        coercion.install(self, subcommands=False)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """See :meth:`typer.core.TyperGroup.main`; with ``standalone_mode`` it exits."""
        try:
            return self._main(
                args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        finally:
            flush_logs()  # lines still gathering reach this command's stderr, not a later one

    def _main(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        standalone_mode: bool,
        windows_expand_args: bool,
        **extra: Any,
    ) -> Any:
        try:
            args = completion.with_shell(sys.argv[1:] if args is None else args)
        except completion.NoShell as exc:
            _fail(str(exc), Exit.USAGE)
        run = (args, prog_name, complete_var)
        if not standalone_mode:
            return super().main(*run, False, windows_expand_args, **extra)
        try:
            result = super().main(*run, False, windows_expand_args, **extra)
        except typer.Abort:
            _fail("aborted", Exit.FAILURE)
        except typer.TyperException as exc:  # Click's UsageError, BadParameter, ...
            if type(exc).__name__ == "NoArgsIsHelpError":
                # `queuey` or `queuey dlq` alone: the help comes as a usage error (Click
                # 8.2+, Typer's own Click), whose one error line would be the whole help
                # with its newlines escaped. Shown as help, on stderr, exit 2, as Click does.
                sys.stderr.write(exc.format_message() + "\n")
                sys.exit(int(getattr(exc, "exit_code", Exit.USAGE)))
            code = int(getattr(exc, "exit_code", Exit.USAGE))
            message = exc.format_message()
            if not message:  # no arguments: the help is already on the screen
                sys.exit(code)
            _fail(message, code)
        # An Exit raised by a command (or --help, --version) comes back as its code.
        sys.exit(result if isinstance(result, int) else Exit.OK)


def _fail(message: str, code: int) -> NoReturn:
    error(message)
    sys.exit(code)


app = typer.Typer(
    name="queuey",
    cls=_OneLineErrors,
    help="Typed background jobs on RabbitMQ or a SQLite file.",
    no_args_is_help=True,
    # Completion is on, with options of our own (queuey_cli.completion): Typer's only
    # guess the shell, which fails in containers and scripts, and ignore one named.
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help in Click's plain layout: Typer's Rich panels import Rich's Markdown and
    # traceback machinery first (about 330 M instructions, 0.15 s), twice what the
    # rest of `queuey worker --help` costs (docs/performance.md).
    rich_markup_mode=None,
)
app.command("worker")(worker.worker)


def _version(value: bool) -> None:
    if value:
        out.print(f"queuey {queuey_core.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    config_path: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            "-c",
            help="Config file (default: $QUEUEY_CONFIG, else ./queuey.toml); repeat it to "
            "lay overlays over the first.",
            dir_okay=False,
        ),
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(help="Logs on stderr: rich, json, or auto (rich on a terminal)."),
    ] = LogFormat.AUTO,
    log_level: Annotated[
        str, typer.Option(help="debug, info, warning or error.", envvar="QUEUEY_LOG_LEVEL")
    ] = "info",
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    install_completion: Annotated[
        completion.Shell | None,
        typer.Option(
            callback=completion.install,
            is_eager=True,
            expose_value=False,
            help="Install tab completion for this shell (default: the one running), then exit.",
        ),
    ] = None,
    show_completion: Annotated[
        completion.Shell | None,
        typer.Option(
            callback=completion.show,
            is_eager=True,
            expose_value=False,
            help="Print the tab-completion script for this shell (default: the one running).",
        ),
    ] = None,
) -> None:
    """Typed background jobs on RabbitMQ or a SQLite file."""
    if log_level.lower() not in {"debug", "info", "warning", "error"}:
        source = ctx.get_parameter_source("log_level")
        hint = "QUEUEY_LOG_LEVEL" if source and source.name == "ENVIRONMENT" else "--log-level"
        raise typer.BadParameter("use debug, info, warning or error", param_hint=hint)
    setup_logging(log_format, log_level)
    ctx.obj = State(config=list(config_path or []))


def main() -> None:
    """The console script: an unexpected failure is one line too (its trace at debug)."""
    ending_with_command()
    try:
        app()
    except KeyboardInterrupt:
        # Ctrl-C before a command handles it, or after (a worker that already stopped,
        # on its way out): stopped, without a traceback.
        sys.exit(Exit.FORCED)
    except Exception as exc:
        logging.getLogger("queuey").debug("unexpected failure", exc_info=True)
        error(f"unexpected failure: {type(exc).__name__}: {exc} (--log-level debug shows where)")
        sys.exit(Exit.FAILURE)
