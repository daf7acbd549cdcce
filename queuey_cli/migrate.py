"""``queuey migrate``: move what the embedded backend's file holds to a RabbitMQ broker.

The configured broker URL names the file (``sqlite:///...``); ``--to`` (or
``QUEUEY_MIGRATE_TO``, which keeps the password out of the process list) names the
broker. Jobs move with what remains of their delay, dead letters with their reason;
then point ``[broker] url`` at the broker. See docs/operations.md.
"""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import backend, cli_errors, state, usage
from queuey_cli.output import out
from queuey_core.urls import redact_all


@cli_errors
def migrate(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            envvar="QUEUEY_MIGRATE_TO",
            help="The broker to move to, amqp(s)://... (or QUEUEY_MIGRATE_TO).",
        ),
    ],
) -> None:
    """Move queued, held and dead-lettered jobs from the embedded backend's file to a
    RabbitMQ broker (stop the workers on the file first)."""
    # Imported here, as in every command module: --help goes without pydantic.
    from pydantic import SecretStr, ValidationError  # noqa: PLC0415

    from queuey_core.backends import open_backend  # noqa: PLC0415
    from queuey_core.settings import BrokerSettings  # noqa: PLC0415

    settings = state(ctx).settings()
    if not settings.broker.is_embedded():
        raise usage("queuey migrate moves from a sqlite:// broker URL: this one is not")
    try:
        target_settings = BrokerSettings(url=SecretStr(to))
    except ValidationError as exc:
        raise usage(f"--to: {exc.errors()[0]['msg']}") from None
    if target_settings.is_embedded():
        raise usage("--to names a broker to move to (amqp:// or amqps://), not a file")
    # Imported here: the move is for this command alone.
    from queuey_core.backends.sqlite.backend import SqliteBackend  # noqa: PLC0415
    from queuey_core.backends.sqlite.migrate import migrate as move  # noqa: PLC0415

    source = backend(settings)
    assert isinstance(source, SqliteBackend)
    try:
        target = open_backend(target_settings)
        try:
            moved = move(source, target, list(settings.queue_set().values()))
        finally:
            target.close()
    finally:
        source.close()
    where = redact_all(target_settings.urls())
    out.print(
        f"moved {moved.jobs} jobs ({moved.held} held for a delay) and {moved.dead_letters} "
        f"dead letters from {source.path} to {where}",
        highlight=False,
    )
    if moved.left_running:
        out.print(
            f"{moved.left_running} jobs are running on the file: run queuey migrate again "
            "once their workers stopped",
            highlight=False,
        )
