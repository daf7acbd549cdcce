"""Each of pika's undocumented names queuey uses (pika_compat.py) is still there.

A failure here names the pika behaviour that changed and the queuey code that relied on
it; test_pika_compat_rabbitmq.py (under tests/integration/backends/rabbitmq/) checks what
each one does on a real broker. Moving pika's pin (pyproject.toml) starts here.
"""

from __future__ import annotations

import inspect

import pika
import pika.connection
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.rabbitmq import pika_compat


def _params(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def _assigns(cls: type, attribute: str) -> bool:
    return f"self.{attribute} =" in inspect.getsource(cls)


def _still_a_connection_method(name: str, params: list[str], needed_by: str) -> None:
    """pika's Connection still has method ``name``, taking ``params``; ``needed_by`` says
    what in queuey relies on it."""
    method = getattr(pika.connection.Connection, name, None)
    assert method is not None, f"pika {pika.__version__}: Connection.{name} is gone; {needed_by}"
    assert _params(method) == params, (
        f"pika {pika.__version__}: Connection.{name} takes "
        f"{_params(method)}, not ({', '.join(params)})"
    )


def test_a_blocking_connection_still_keeps_its_async_connection_in_impl() -> None:
    assert _assigns(pika.BlockingConnection, "_impl"), (
        f"pika {pika.__version__}: BlockingConnection no longer sets self._impl; "
        "pika_compat's server_properties, connected_params, call_later, terminate_stream "
        "and on_blocked_now reach the connection under it through it"
    )


def test_a_blocking_channel_still_keeps_its_async_channel_in_impl() -> None:
    assert _assigns(BlockingChannel, "_impl"), (
        f"pika {pika.__version__}: BlockingChannel no longer sets self._impl; "
        "pika_compat.nowait_channel (admin.Declares, many declares in one round trip) "
        "needs the channel under it"
    )


def test_a_connection_can_still_be_terminated_as_if_its_stream_was_lost() -> None:
    _still_a_connection_method(
        "_terminate_stream",
        ["self", "error"],
        "pika_compat.terminate_stream (a direct publish's deadline, direct.py) needs "
        "another way to end a blocking publish that waits for its confirm",
    )


def test_marshalled_frames_can_still_be_written_through_pikas_output() -> None:
    _still_a_connection_method(
        "_output_marshaled_frames",
        ["self", "marshaled_frames"],
        "pika_compat.write_frames (the publisher link's hand-marshalled batches) needs "
        "another way to write frames that the heartbeat checker counts",
    )


def test_frames_written_through_pika_compat_reach_pikas_output() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.written: list[bytes] = []

        def _output_marshaled_frames(self, frames: list[bytes]) -> None:
            self.written.extend(frames)

    recorder = Recorder()
    pika_compat.write_frames(recorder, b"frames")
    assert recorder.written == [b"frames"], "one write of the whole batch"


def test_the_async_connection_still_has_what_pika_compat_reads() -> None:
    # A BlockingConnection's _impl is a SelectConnection.
    for attribute, why in (
        ("ioloop", "call_later and remove_timeout (a direct publish's deadline, direct.py)"),
        ("add_on_connection_blocked_callback", "on_blocked_now (direct.py)"),
        ("add_on_connection_unblocked_callback", "on_blocked_now (direct.py)"),
    ):
        assert hasattr(pika.SelectConnection, attribute), (
            f"pika {pika.__version__}: SelectConnection has no {attribute}; "
            f"pika_compat.{why} relies on it"
        )
    for attribute, why in (
        ("server_properties", "server_properties (the broker's version, admin.py)"),
        ("params", "connected_params (which node answered, nodes.py)"),
    ):
        assert _assigns(pika.connection.Connection, attribute), (
            f"pika {pika.__version__}: Connection no longer sets self.{attribute}; "
            f"pika_compat.{why} relies on it"
        )


def test_a_handshake_timeout_is_still_an_error_pika_compat_translates() -> None:
    from pika.adapters.utils import connection_workflow  # noqa: PLC0415

    assert issubclass(
        connection_workflow.AMQPConnectorStackTimeout, connection_workflow.AMQPConnectorException
    ), (
        f"pika {pika.__version__}: AMQPConnectorStackTimeout no longer derives from "
        "AMQPConnectorException; pika_compat.open_blocking would let it escape"
    )


def test_a_connector_error_comes_out_of_open_blocking_as_an_amqp_connection_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pika.adapters.utils import connection_workflow  # noqa: PLC0415

    def times_out(params: object) -> None:
        raise connection_workflow.AMQPConnectorStackTimeout("Timeout during AMQP handshake")

    monkeypatch.setattr(pika, "BlockingConnection", times_out)
    with pytest.raises(pika.exceptions.AMQPConnectionError) as caught:
        pika_compat.open_blocking(pika.ConnectionParameters())
    assert isinstance(caught.value.__cause__, connection_workflow.AMQPConnectorStackTimeout)


def test_a_connection_still_reads_through_on_data_available_into_a_frame_buffer() -> None:
    from pika.adapters.base_connection import BaseConnection  # noqa: PLC0415
    from pika.channel import Channel  # noqa: PLC0415
    from pika.channel import ContentFrameAssembler  # noqa: PLC0415

    needed_by = (
        "pika_compat.read_with, take_buffer, keep_buffer, count_read and assembling "
        "(the consumer link's delivery reader, delivery_frames.py) rely on it"
    )
    reads = inspect.getsource(BaseConnection._proto_data_received)
    assert "self._on_data_available(data)" in reads, (
        f"pika {pika.__version__}: the transport no longer hands its reads to "
        f"_on_data_available; {needed_by}"
    )
    _still_a_connection_method("_on_data_available", ["self", "data_in"], needed_by)
    for attribute in ("_frame_buffer", "bytes_received", "frames_received"):
        assert _assigns(pika.connection.Connection, attribute), (
            f"pika {pika.__version__}: Connection no longer keeps {attribute}; {needed_by}"
        )
    assert _assigns(Channel, "_content_assembler"), f"pika {pika.__version__}: {needed_by}"
    assert _assigns(ContentFrameAssembler, "_method_frame"), f"pika {pika.__version__}: {needed_by}"
    assert _params(pika.data.decode_table) == ["encoded", "offset"], (
        f"pika {pika.__version__}: pika.data.decode_table changed; pika_compat.decode_table "
        "(a delivery's headers) calls it"
    )


def test_a_connection_in_its_handshake_can_still_be_told_apart_and_ended() -> None:
    from pika.adapters.base_connection import BaseConnection  # noqa: PLC0415

    for attribute in ("_connection_workflow", "_transport"):
        assert _assigns(BaseConnection, attribute), (
            f"pika {pika.__version__}: BaseConnection no longer sets self.{attribute}; "
            "pika_compat.abort_opening tells a connection in its handshake by it"
        )
    _still_a_connection_method(
        "_terminate_stream", ["self", "error"], "pika_compat.abort_opening ends a handshake with it"
    )


def test_a_handshake_nobody_answers_reads_as_one_plain_phrase() -> None:
    from pika.adapters.utils import connection_workflow  # noqa: PLC0415

    from queuey_core.backends.rabbitmq.errors import connect_error  # noqa: PLC0415

    timeout = connection_workflow.AMQPConnectorStackTimeout(
        "Timeout during AMQP handshake'127.0.0.1'/(<AddressFamily.AF_INET: 2>, ...)"
    )
    wrapped = pika.exceptions.AMQPConnectionError(
        connection_workflow.AMQPConnectionWorkflowFailed([timeout])
    )
    text = str(connect_error(wrapped, "amqp://guest:***@127.0.0.1:5699/"))
    assert text.startswith(
        "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:5699/: it accepted the "
        "connection but did not answer the AMQP handshake in time"
    )
    assert "AddressFamily" not in text
