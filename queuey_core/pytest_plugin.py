"""queuey's pytest plugin: the ``queuey`` fixture, a :class:`~queuey_core.testing.QueueyKit`
per test.

Installed with queuey (the ``pytest11`` entry point ``queuey``), so any project that
has queuey installed can ask for the fixture. It costs a run that does not use it
nothing: this module imports pytest and nothing of queuey's until a test asks.

Configure the kit with the ``queuey`` marker (``@pytest.mark.queuey(backend="sqlite",
raise_errors=False, handlers=[...])``: any :class:`~queuey_core.testing.QueueyKit`
argument), or parametrize the fixture with backend names
(``@pytest.mark.parametrize("queuey", ["memory", "sqlite"], indirect=True)``).

Owns: the fixture and its marker. Must never: define a fixture under any other name (a
project's own fixtures keep theirs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from queuey_core.testing import QueueyKit


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``queuey`` marker (``--strict-markers`` knows it)."""
    config.addinivalue_line(
        "markers", "queuey(**options): options of the queuey fixture's QueueyKit"
    )


@pytest.fixture
def queuey(request: pytest.FixtureRequest) -> Iterator[QueueyKit]:
    """A :class:`~queuey_core.testing.QueueyKit` on a fresh backend and clock, closed after
    the test."""
    from queuey_core.testing import QueueyKit  # noqa: PLC0415 (only when a test asks)

    options: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("queuey"))):
        if marker.args:
            raise pytest.UsageError("@pytest.mark.queuey takes keyword arguments only")
        options.update(marker.kwargs)
    param = getattr(request, "param", None)
    if isinstance(param, str):
        options["backend"] = param
    elif isinstance(param, dict):
        options.update(param)
    elif param is not None:
        raise pytest.UsageError(
            f"the queuey fixture takes a backend name or a dict of options, not {param!r}"
        )
    kit = QueueyKit(**options)
    try:
        yield kit
    finally:
        kit.close()
