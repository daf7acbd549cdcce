"""A FastAPI service that enqueues a queuey job from a request handler.

    pip install -r examples/fastapi_app/requirements.txt
    QUEUEY_BROKER__URL=amqp://guest:guest@127.0.0.1:5672/%2F \\
        uvicorn examples.fastapi_app.app:app            # from the repository's root

    curl -X POST localhost:8000/signups -H 'content-type: application/json' \\
        -d '{"email": "ada@example.com"}'

One :class:`~queuey_core.AsyncProducer` for the whole app, made when the app starts and
closed when it stops (FastAPI's lifespan), shared by every request: ``await
producer.enqueue(...)`` never blocks the event loop, so the app keeps serving other
requests while the broker confirms the job. The answer tells the client what became of
the job: 202 with its id once confirmed; 503 when the broker may or may not have it
(``EnqueueUnknownError``: the client may retry with the same ``Idempotency-Key``, which
becomes the job id, so a worker can tell the duplicate); 503 when it was not enqueued.

The job's handler is an ``async def`` too; a worker runs it with
``queuey worker`` (the handler registered as a plugin) or, here, ``python -m
examples.fastapi_app.app worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Annotated, ClassVar

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

from queuey_core import (
    AsyncProducer,
    Backend,
    DuplicateJobError,
    EnqueueUnknownError,
    Job,
    JobContext,
    NotEnqueuedError,
    QueueConfig,
    QueueSet,
    Worker,
    handler,
)

QUEUES = QueueSet([QueueConfig("signups", prefetch=200, async_concurrency=200)])
BROKER = os.environ.get("QUEUEY_BROKER__URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


class SendWelcome(Job):
    NAME: ClassVar[str] = "send_welcome"
    QUEUE: ClassVar[str] = "signups"
    email: str


@handler
async def send_welcome(job: SendWelcome, ctx: JobContext) -> None:
    """Send the welcome mail (here: wait as an HTTP call to a mail API would)."""
    await asyncio.sleep(0.05)


class Signup(BaseModel):
    email: str


class Accepted(BaseModel):
    job_id: str


def make_backend() -> Backend:
    """The broker the app and its worker use (``QUEUEY_BROKER__URL``)."""
    from queuey_core import RabbitMQBackend  # noqa: PLC0415

    return RabbitMQBackend(BROKER)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Made before the first request: declaring the queues is a blocking call.
    async with AsyncProducer(make_backend(), QUEUES, close_backend=True) as producer:
        app.state.producer = producer
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/signups", status_code=202)
async def signup(body: Signup, idempotency_key: Annotated[str | None, Header()] = None) -> Accepted:
    """Enqueue the welcome mail of a new signup."""
    producer: AsyncProducer = app.state.producer
    try:
        job_id = await producer.enqueue(SendWelcome(email=body.email), job_id=idempotency_key)
    except ValueError as exc:  # an Idempotency-Key that cannot be a job id
        raise HTTPException(422, str(exc)) from None
    except DuplicateJobError as exc:
        # The same key again, while its job holds it (on a backend that keeps job ids as
        # keys: docs/flow-control.md): the request was already accepted, as that job.
        return Accepted(job_id=str(exc.existing))
    except EnqueueUnknownError:
        raise HTTPException(
            503, "the job may or may not be queued: retry with the same key"
        ) from None
    except NotEnqueuedError:
        raise HTTPException(503, "the job was not queued: retry") from None
    return Accepted(job_id=str(job_id))


def run_worker() -> None:
    """A worker for the app's jobs, until Ctrl-C."""
    worker = Worker(make_backend(), QUEUES, [send_welcome], concurrency=2)
    try:
        worker.run()
    except KeyboardInterrupt:
        worker.handle.shutdown()


if __name__ == "__main__" and sys.argv[1:] == ["worker"]:
    run_worker()
