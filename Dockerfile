# queuey worker image: `docker run IMAGE` runs `queuey worker` on every queue of the
# bundled queuey.toml (alpha and beta); any other subcommand works too
# (`docker run IMAGE dlq list`). SIGTERM from `docker stop` reaches queuey
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
# The worker serves /metrics, /healthz and /readyz on this port (docs/operations.md).
# The health check asks /healthz: unhealthy only when a restart would help (a dead run
# loop or connection thread, recovery given up), not while draining or reconnecting.
# The image has no curl: Python's urllib asks, and a refusal or a 503 exits 1.
ENV QUEUEY_WORKER__METRICS_PORT=9191
EXPOSE 9191
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['QUEUEY_WORKER__METRICS_PORT'], timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["queuey"]
CMD ["worker"]
