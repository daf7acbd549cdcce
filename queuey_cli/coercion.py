"""Option values that are already what they declare skip Typer's pydantic check.

Typer (0.29) checks every option's value with a pydantic ``TypeAdapter`` it builds on
the option's first use, defaults included, so that ``queuey --help`` or any command run
with its defaults imported pydantic and built an adapter per option of the root and the
command: about half the time of a ``--help``. A value that already is of the option's
declared type (a default, or any ``str`` option's text) comes out of those adapters
unchanged, so it is returned as is; anything else (text for an ``int``, a path, a list)
still goes through Typer's own adapter, built on first use as before, with its checks
and error messages.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import typer.core
from typer._click import Command, Context
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_choice

#: An int as the command line writes it, whose value Python and pydantic read alike.
_DIGITS = re.compile(r"-?[0-9]{1,18}")

#: The plain types whose values Typer's adapters return unchanged (no parser, no range).
_PLAIN = (str, int, float, bool)


@dataclass(frozen=True)
class _UnchangedFirst(RuntimeParam):
    """Typer's coercion, with values already of the declared type returned as they are."""

    descriptor: TypeDescriptor
    _typer: list[RuntimeParam] = field(default_factory=list)

    def _coerce_value(self, value: Any, param: typer.core._TyperParameter, ctx: Context) -> Any:
        if _unchanged(value, self.descriptor):
            return value
        converted = _plainly(value, self.descriptor, ctx)
        if converted is not None:
            return converted
        if not self._typer:  # built once, on the first value that needs it
            self._typer.append(build_runtime_param(self.descriptor))
        return self._typer[0]._coerce_value(value, param=param, ctx=ctx)


def _shortcut(param: object) -> None:
    if isinstance(param, typer.core._TyperParameter) and param._runtime_param is None:
        descriptor = param.type_descriptor
        param._runtime_param = _UnchangedFirst(
            annotation=descriptor.annotation,
            parameter_info=descriptor.parameter_info,
            descriptor=descriptor,
        )


def _plainly(value: Any, descriptor: TypeDescriptor, ctx: Context) -> Any:
    """What Typer's adapter makes of ``value`` when that needs no pydantic (a choice's
    name, digits for an int in range: what the worker's own options get); else None,
    and a value that is refused goes to the adapter, which says why as before."""
    annotation = descriptor.annotation
    info = descriptor.parameter_info
    if info.parser is not None or not isinstance(value, str):
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        # The adapter's own validator, called without pydantic around it.
        with contextlib.suppress(ValueError):
            return coerce_cli_choice(
                value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx
            )
        return None
    if annotation is int and _DIGITS.fullmatch(value):
        number = int(value)
        if (info.min is None or number >= info.min) and (info.max is None or number <= info.max):
            return number
    return None


def _unchanged(value: Any, descriptor: TypeDescriptor) -> bool:
    """Whether Typer's adapter would return ``value`` itself."""
    annotation = descriptor.annotation
    info = descriptor.parameter_info
    if info.parser is not None or descriptor.is_file:
        return False
    if annotation in _PLAIN:
        # bool is an int, and an int passes for a float after conversion: exact types only.
        if type(value) is not annotation:
            return False
        if info.min is not None and value < info.min:
            return False
        return info.max is None or value <= info.max
    return (
        isinstance(annotation, type)
        and issubclass(annotation, Enum)
        and isinstance(value, annotation)
    )


def install(command: Any, *, subcommands: bool = True) -> None:
    """Give every option and argument of ``command`` (and its subcommands) the shortcut."""
    for param in getattr(command, "params", ()):
        _shortcut(param)
    if isinstance(command, Command):
        # The --help option is made on first use (Click's ``get_help_option``), and its
        # value, None unless given, still built an adapter on the way.
        made_by_typer = command.get_help_option

        def get_help_option(ctx: Context) -> Any:
            option = made_by_typer(ctx)
            _shortcut(option)
            return option

        vars(command)["get_help_option"] = get_help_option
    if subcommands:
        for sub in getattr(command, "commands", {}).values():
            install(sub)
