"""The option shortcut: a value already of its declared type comes out as Typer's own
pydantic adapter would return it, and anything else still goes through that adapter."""

from __future__ import annotations

import enum
import functools
from pathlib import Path
from typing import Annotated
from typing import Any

import pytest
import typer
import typer.main
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from typer._click import Context
from typer._coercion import build_runtime_param

from queuey_cli import coercion


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


seen: dict[str, Any] = {}


def command(
    text: Annotated[str, typer.Option()] = "x",
    count: Annotated[int, typer.Option(min=1, max=10)] = 3,
    ratio: Annotated[float, typer.Option()] = 0.5,
    flag: Annotated[bool, typer.Option()] = False,
    colour: Annotated[Colour, typer.Option()] = Colour.RED,
    where: Annotated[Path | None, typer.Option()] = None,
    many: Annotated[list[int] | None, typer.Option()] = None,
) -> None:
    seen.update(locals())


@functools.cache
def built() -> Any:
    app = typer.Typer()
    app.command()(command)
    click_command = typer.main.get_command(app)
    coercion.install(click_command)
    return click_command


def both(name: str, value: Any) -> tuple[Any, Any]:
    """The shortcut's answer and Typer's for ``value`` of option ``name``."""
    param = next(p for p in built().params if p.name == name)
    ctx = Context(built())
    ours = param.get_runtime_param().coerce(value, param=param, ctx=ctx)
    typers = build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)
    return ours, typers


# The first example builds Typer's adapters (pydantic): no deadline on a loaded machine.
@settings(deadline=None)
@given(st.text())
def test_text_comes_out_as_typer_would(value: str) -> None:
    ours, typers = both("text", value)
    assert ours == typers
    assert type(ours) is type(typers)


@settings(deadline=None)
@given(
    st.one_of(
        st.integers(),
        st.floats(allow_nan=False),
        st.booleans(),
        st.text(),
        st.from_regex(r"\A[-+ ]?[0-9_]{1,25} ?\Z"),
    )
)
def test_numbers_come_out_as_typer_would(value: Any) -> None:
    for name in ("count", "ratio"):
        ours, typers = outcome(name, value)
        assert ours == typers
        assert type(ours) is type(typers)


def outcome(name: str, value: Any) -> tuple[Any, Any]:
    """As :func:`both`, with a refusal as its message on both sides."""
    param = next(p for p in built().params if p.name == name)
    ctx = Context(built())
    answers = []
    for runtime in (param.get_runtime_param(), build_runtime_param(param.type_descriptor)):
        try:
            answers.append(runtime.coerce(value, param=param, ctx=ctx))
        except typer.BadParameter as exc:
            answers.append(exc.message)
    return answers[0], answers[1]


@pytest.mark.parametrize("value", [Colour.RED, Colour.BLUE, "blue", "RED", "green", 1])
def test_choices_come_out_as_typer_would(value: Any) -> None:
    ours, typers = outcome("colour", value)
    assert ours == typers
    assert type(ours) is type(typers)


def run(*args: str) -> int:
    """Run the command with the shortcut installed: 0, or 2 for a refused value."""
    try:
        built().main(list(args), standalone_mode=False)
    except typer.BadParameter:
        return 2
    return 0


def test_the_command_line_still_converts_and_refuses() -> None:
    assert run("--count", "7", "--ratio", "2", "--colour", "blue", "--many", "4") == 0
    assert (seen["count"], seen["ratio"], seen["colour"], seen["many"]) == (
        7,
        2.0,
        Colour.BLUE,
        [4],
    )
    assert run("--count", "11") == 2
    assert run("--colour", "green") == 2
    assert run() == 0
    assert (seen["text"], seen["count"], seen["colour"], seen["where"]) == (
        "x",
        3,
        Colour.RED,
        None,
    )
