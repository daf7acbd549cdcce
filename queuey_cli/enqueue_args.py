"""``queuey enqueue``'s ``--wait [TIMEOUT]`` and ``--timeout`` options, and the Click
command class that gives ``--wait`` its optional value (:class:`EnqueueCommand`).

Kept apart from :mod:`.enqueue_wait`, which waits on the job store: this module imports
only Typer, so that ``queuey enqueue --help`` loads neither pydantic nor the store
(docs/performance.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperOption

WaitOption = typer.Option(
    "--wait",
    metavar="[TIMEOUT]",
    help="Wait for the job to finish and print its result (needs a job store); "
    "with a number (30, 30s, 5m), give up after that long (default: no limit).",
)
TimeoutOption = typer.Option("--timeout", help="The same as --wait TIMEOUT, e.g. 30s.")

#: What a bare ``--wait`` becomes: wait, with the default timeout (no limit).
_BARE = ""
#: A word after ``--wait`` that is its timeout: a number, with or without a unit.
_TIMEOUT = re.compile(r"\d+(?:\.\d+)?(?:ms|s|m|h|d)?")


def join_wait_value(args: Sequence[str], takes_value: frozenset[str]) -> list[str]:
    """``args`` with each ``--wait`` given its value in one word: ``--wait=30`` when a
    number follows it (that number taken), ``--wait=`` (the default) otherwise.

    ``takes_value``: the command's options that take a value, whose value is skipped
    (``--job-id --wait`` is a job id); nothing after ``--`` is touched."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out.extend(args[i - 1 :])
            break
        if arg == "--wait":
            if i < len(args) and _TIMEOUT.fullmatch(args[i]):
                out.append(f"--wait={args[i]}")
                i += 1
            else:
                out.append(f"--wait={_BARE}")
            continue
        out.append(arg)
        if arg in takes_value and i < len(args):
            out.append(args[i])
            i += 1
    return out


class EnqueueCommand(TyperCommand):
    """``queuey enqueue``'s Click command: ``--wait`` with an optional value."""

    # ctx: Click's Context, which Typer keeps in a private module of its own.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """See :func:`join_wait_value`."""
        takes_value = frozenset(
            name
            for param in self.params
            if isinstance(param, TyperOption) and not param.is_flag and not param.count
            for name in param.opts
        )
        return super().parse_args(ctx, join_wait_value(args, takes_value))
