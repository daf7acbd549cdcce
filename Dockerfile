# queuey's image (docs/containers.md): `docker run IMAGE` runs `queuey worker` on every
# queue of the bundled queuey.toml (alpha and beta); any other subcommand works too
# (`docker run IMAGE dlq list`, `... dashboard`, `... scheduler`). SIGTERM from
# `docker stop` reaches queuey directly (exec-form ENTRYPOINT, no shell in between) and
# drains the worker.
#
# The base is yours to choose: python:3.11-slim by default, any image with Python 3.11
# and its venv module through `--build-arg BASE_IMAGE=...` (both stages use it).
# Build with Docker, or with podman and `--format docker`: podman's default OCI format
# drops HEALTHCHECK ("not supported for OCI image format").
ARG BASE_IMAGE=python:3.11-slim

# -- build: the package, its dashboard extra and the example handlers, in a venv ---------
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY queuey_core ./queuey_core
COPY queuey_cli ./queuey_cli
COPY queuey_dashboard ./queuey_dashboard
COPY handlers ./handlers
# No pip, setuptools or wheel in the venv that ships: the image runs, it does not install.
RUN python -m venv --without-pip /opt/queuey \
 && python -m pip --python /opt/queuey/bin/python install './[dashboard]' ./handlers

# -- the image: the base, the venv, a user and a home for data ---------------------------
FROM ${BASE_IMAGE}
ENV PATH=/opt/queuey/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    QUEUEY_CONFIG=/app/queuey.toml
COPY --from=build /opt/queuey /opt/queuey
COPY queuey.toml /app/queuey.toml
# /data holds the embedded backend's file and the SQLite job store. It is the working
# directory, so the relative `sqlite:///queuey.db` lands there too; the configuration is
# read from /app (QUEUEY_CONFIG), so mounting a host directory on /data hides nothing.
RUN useradd --create-home --uid 10001 --user-group queuey \
 && mkdir /data && chown queuey:queuey /data
VOLUME /data
WORKDIR /data
USER queuey

# Every long-running subcommand answers the health check: the worker and the scheduler
# serve /healthz on this port, the dashboard on its own (docs/containers.md).
# `queuey health` asks whichever answers: unhealthy only when a restart would help (a
# dead run loop or connection thread, recovery given up), not while draining or
# reconnecting; nothing answering is unhealthy too.
ENV QUEUEY_WORKER__METRICS_PORT=9191 \
    QUEUEY_SCHEDULER__METRICS_PORT=9191
EXPOSE 9191 8180
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["queuey", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["queuey"]
CMD ["worker"]
