"""Translating pika's errors into queuey's, at the package's edge.

Owns: the short phrases that name what went wrong (unwrapping the layers pika nests its
connection errors in) and the mapping of broker refusals to :mod:`queuey_core.errors`.
Must never: let a pika exception type escape the package, or quote a broker URL with
its password (callers pass the redacted ``where``).
"""

from __future__ import annotations

import ssl

import pika
import pika.exceptions

from queuey_core.backends.rabbitmq import pika_compat
from queuey_core.errors import BackendError, ConfigError, QueueyError


def error_text(exc: BaseException) -> str:
    """``Type: message`` of a pika or socket error, as it is (for log lines and
    BackendError messages; :func:`queuey_core.text.ascii_error_text` escapes it for a
    header)."""
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


def connect_error(error: BaseException, where: str) -> BackendError:
    if isinstance(
        error, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError
    ):
        return BackendError(f"RabbitMQ at {where} refused the credentials")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return BackendError(f"RabbitMQ at {where} denied access to the virtual host")
    problem = tls_problem(error)
    if problem is not None:
        return BackendError(f"TLS with RabbitMQ at {where} failed: {problem}")
    return BackendError(f"cannot reach RabbitMQ at {where}: {root_cause(error)}; {NO_SERVER}")


#: Said whenever RabbitMQ cannot be reached: queuey never falls back to a file on its
#: own (a worker whose broker is briefly down must not take jobs from somewhere else),
#: so the way to run without a server is a URL to choose.
NO_SERVER = 'to run without a server, set [broker] url = "sqlite:///queuey.db"'


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors pika wrapped in it (several deep), outermost first."""
    chain = [error]
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
        chain.append(error)
    return chain


def root_cause(error: BaseException) -> str:
    """The innermost error pika wrapped (it nests them several deep), as a short phrase."""
    error = _chain(error)[-1]
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror.lower()} ({type(error).__name__})"
    if pika_compat.is_handshake_timeout(error):
        # pika's text is the repr of a getaddrinfo record: say what it means.
        return (
            "it accepted the connection but did not answer the AMQP handshake in time "
            "(is that port RabbitMQ's?)"
        )
    return error_text(error)


#: OpenSSL's verify codes for "no CA we trust vouches for this certificate".
_UNTRUSTED = {2, 18, 19, 20, 21}
_HOSTNAME_MISMATCH = {62, 64}  # a DNS name, an IP address

#: What the broker's TLS alert (or our handshake's error) means, by its OpenSSL name. pika
#: keeps only the text of an error it met after the handshake, not the error itself.
_ALERTS = {
    "CERTIFICATE_REQUIRED": "the broker requires a client certificate and none was given",
    "UNKNOWN_CA": "the broker does not trust the client certificate (unknown CA)",
    "CERTIFICATE_EXPIRED": "the broker refused the client certificate: it has expired",
    "BAD_CERTIFICATE": "the broker refused the client certificate (bad certificate)",
    "HANDSHAKE_FAILURE": (
        "the broker ended the handshake (handshake failure): no client certificate, or no "
        "TLS version or cipher in common"
    ),
    "WRONG_VERSION_NUMBER": "the broker did not answer in TLS: is that port a plain amqp:// one?",
    # TLS 1.3 checks the client's certificate after our side of the handshake is done: the
    # broker's alert can be lost when it hangs up, and only the hang-up is left.
    "SSLEOFERROR": (
        "the broker hung up during the TLS handshake: it requires a client certificate and "
        "none was given, or it does not accept the one given"
    ),
}


def tls_problem(error: BaseException) -> str | None:
    """What went wrong in a TLS handshake, as one phrase; None if it was not TLS."""
    chain = _chain(error)
    for link in chain:
        if isinstance(link, ssl.SSLCertVerificationError):
            return _unverified(link)
    text = " ".join(str(link) for link in chain).upper()
    for name, phrase in _ALERTS.items():
        if name in text:
            return phrase
    for link in chain:
        if isinstance(link, ssl.SSLError):
            return f"TLS error: {link.reason or link}"
    return None


def _unverified(error: ssl.SSLCertVerificationError) -> str:
    code, message = error.verify_code, str(error.verify_message)
    if code in _HOSTNAME_MISMATCH:
        return (
            f"the broker's certificate is not for the server name asked for ({message}): "
            "connect by a name the certificate holds, or set the server name"
        )
    if code == 10:
        return "the broker's certificate has expired"
    if code == 9:
        return "the broker's certificate is not valid yet"
    if code in _UNTRUSTED:
        return (
            f"the broker's certificate is not signed by a CA we trust ({message}): give the "
            "CA file of the CA that signed it"
        )
    return f"the broker's certificate did not verify: {message}"


def refused(exc: pika.exceptions.ChannelClosedByBroker) -> QueueyError:
    text = exc.reply_text
    if exc.reply_code == 406:
        return ConfigError(f"RabbitMQ refused the declaration: {text}")
    if exc.reply_code == 404:
        return BackendError(f"RabbitMQ: {text}")
    if exc.reply_code == 403:
        return BackendError(f"RabbitMQ denied access: {text}")
    return BackendError(f"RabbitMQ closed the channel: {exc.reply_code} {text}")
