"""Shell completion: Typer's scripts and installer, behind options that take the shell.

``queuey --install-completion [SHELL]`` and ``--show-completion [SHELL]``: a shell named
is used as it is (so both work in a container, a script or CI, where there is no shell
to detect); without one, the shell this runs under is detected (shellingham, as Typer
does). Typer's own options only ever detect, and silently ignore a shell named after
them. Completion itself is Typer's: the scripts call ``queuey`` back with
``_QUEUEY_COMPLETE`` set, which the root command answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import shellingham  # type: ignore[import-untyped]  # Typer's own dependency, for the same job
import typer
from typer._completion_classes import completion_init
from typer.completion import install_callback, show_callback

#: The options, each taking the shell as its value.
OPTIONS = ("--install-completion", "--show-completion")


class Shell(StrEnum):
    """The shells Typer writes completion scripts for."""

    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"
    POWERSHELL = "powershell"
    PWSH = "pwsh"


# Typer's completion classes: what answers `_QUEUEY_COMPLETE=complete_bash queuey ...`,
# the call the scripts make at each <Tab>.
completion_init()


def detected_shell() -> Shell | None:
    """The shell this process runs under, found in its ancestors; None if none we know."""
    try:
        name, _ = shellingham.detect_shell()
    except (shellingham.ShellDetectionFailure, OSError, RuntimeError):
        return None
    try:
        return Shell(str(name).lower())
    except ValueError:
        return None


class NoShell(Exception):
    """A completion option without a shell, and none detected."""


def with_shell(args: Sequence[str]) -> list[str]:
    """``args`` with the detected shell after a completion option that names none.

    Raises:
        NoShell: when one is needed and none can be detected.
    """
    result = list(args)
    for i, arg in enumerate(result):
        if arg in OPTIONS and (i + 1 == len(result) or result[i + 1].startswith("-")):
            shell = detected_shell()
            if shell is None:
                raise NoShell(
                    f"{arg}: could not tell which shell this is: name it "
                    f"({', '.join(s.value for s in Shell)})"
                )
            result.insert(i + 1, shell.value)
            break  # either option exits the program: the first one is enough
    return result


def show(ctx: typer.Context, param: typer.CallbackParam, value: Shell | None) -> None:
    """``--show-completion SHELL``: print the script and exit 0."""
    if value is not None:
        show_callback(ctx, param, value.value)


def install(ctx: typer.Context, param: typer.CallbackParam, value: Shell | None) -> None:
    """``--install-completion SHELL``: write the script where the shell reads it, exit 0."""
    if value is not None:
        install_callback(ctx, param, value.value)
