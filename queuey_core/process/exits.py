"""The exit codes of a queuey process (``queuey worker``, ``queuey scheduler``, ...).

:func:`queuey_core.process.run_worker` and :func:`~queuey_core.process.run_scheduler`
return one of these; the command line exits with it.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The exit codes of ``queuey``."""

    OK = 0
    FAILURE = 1  # the broker refused or could not be reached
    USAGE = 2  # bad input: arguments, payloads, configuration
    BROKER_LOST = 3  # a worker lost the broker and could not recover
    UNKNOWN = 4  # an enqueue may or may not have reached the broker
    JOB_FAILED = 5  # enqueue --wait: the job was dead-lettered or cancelled
    WAIT_TIMEOUT = 6  # enqueue --wait: the job had not finished in time
    NO_SUCH_JOB = 7  # job / cancel: the job store does not know that id
    ALREADY_FINISHED = 8  # cancel: the job had already finished
    DUPLICATE = 9  # enqueue: another job holds the unique key; nothing enqueued for it
    FORCED = 130  # a second signal, or the shutdown timeout: stopped at once
