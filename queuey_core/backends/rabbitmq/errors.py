"""Translating pika's errors into queuey's, at the package's edge.

Owns: the short phrases that name what went wrong (unwrapping the layers pika nests its
connection errors in) and the mapping of broker refusals to :mod:`queuey_core.errors`.
Must never: let a pika exception type escape the package, or quote a broker URL with
its password (callers pass the redacted ``where``).
"""

from __future__ import annotations

import pika
import pika.exceptions

from queuey_core.errors import BackendError, ConfigError, QueueyError


def describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


def connect_error(error: BaseException, where: str) -> BackendError:
    if isinstance(
        error, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError
    ):
        return BackendError(f"RabbitMQ at {where} refused the credentials")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return BackendError(f"RabbitMQ at {where} denied access to the virtual host")
    return BackendError(f"cannot reach RabbitMQ at {where}: {root_cause(error)}")


def root_cause(error: BaseException) -> str:
    """The innermost error pika wrapped (it nests them several deep), as a short phrase."""
    for _ in range(10):
        attempts = getattr(error, "exceptions", None)  # a connection workflow's attempts
        phase = getattr(error, "exception", None)  # a connector phase's error
        if (
            isinstance(attempts, list | tuple)
            and attempts
            and isinstance(attempts[-1], BaseException)
        ):
            error = attempts[-1]
        elif isinstance(phase, BaseException):
            error = phase
        elif error.args and isinstance(error.args[0], BaseException):
            error = error.args[0]
        else:
            break
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror.lower()} ({type(error).__name__})"
    return describe(error)


def refused(exc: pika.exceptions.ChannelClosedByBroker) -> QueueyError:
    text = exc.reply_text
    if exc.reply_code == 406:
        return ConfigError(f"RabbitMQ refused the declaration: {text}")
    if exc.reply_code == 404:
        return BackendError(f"RabbitMQ: {text}")
    if exc.reply_code == 403:
        return BackendError(f"RabbitMQ denied access: {text}")
    return BackendError(f"RabbitMQ closed the channel: {exc.reply_code} {text}")
