# queuey worker image: `docker run IMAGE` runs `queuey worker`; any other subcommand
# works too (`docker run IMAGE dlq list`). SIGTERM from `docker stop` reaches queuey
# directly (exec-form ENTRYPOINT, no shell in between) and drains the worker.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY queuey_core ./queuey_core
COPY queuey_cli ./queuey_cli
COPY handlers ./handlers
COPY queuey.toml ./

RUN pip install . ./handlers \
 && useradd --create-home --uid 10001 --user-group queuey

USER queuey
STOPSIGNAL SIGTERM
ENTRYPOINT ["queuey"]
CMD ["worker"]
