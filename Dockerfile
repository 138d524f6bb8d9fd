# syntax=docker/dockerfile:1
# One image for every daemon and CLI of the project: lakefs-mirror, lakefs-gc, lakefs-server, lakefs-core.
#
#   docker build -t lakefs-open:0.1.0 .                                  # mirror, GC (lite mode), CLIs
#   docker build --build-arg EXTRAS=spark -t lakefs-open-gc:0.1.0 .      # + PySpark and a JVM (GC mark)
#
# Multi-stage: the build stage has the compiler (the optional Cython extensions) and pip; the
# runtime stage has only the virtual environment at /opt/lakefs/.venv (the path deploy/ecs/*.json
# run), runs as the unprivileged user 10001:10001 and works on a read-only root filesystem (state,
# caches and work directories are volumes; see docs/deployment.md). Linted by hadolint in CI
# (tests/test_dockerfile.py).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY lakefs_core ./lakefs_core
COPY lakefs_mirror ./lakefs_mirror
COPY lakefs_gc ./lakefs_gc
COPY lakefs_server ./lakefs_server
RUN python -m venv /opt/lakefs/.venv \
    && /opt/lakefs/.venv/bin/pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
    && /opt/lakefs/.venv/bin/lakefs-mirror --help >/dev/null

FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=""
# A JVM only for the Spark extra (the GC mark on PySpark); curl for container health checks.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && if [ "${EXTRAS#*spark}" != "${EXTRAS}" ]; then \
         apt-get install -y --no-install-recommends default-jre-headless; \
       fi \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 lakefs \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
         --shell /usr/sbin/nologin lakefs \
    && install -d -o 10001 -g 10001 -m 0700 /var/cache/lakefs-mirror /var/lib/lakefs-gc
COPY --from=build /opt/lakefs/.venv /opt/lakefs/.venv
COPY deploy/mirror-aws.yaml /etc/lakefs/mirror.yaml
COPY deploy/gc-aws.yaml /etc/lakefs/gc.yaml
ENV PATH=/opt/lakefs/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 8008 8010
CMD ["lakefs-mirror", "run", "--config", "/etc/lakefs/mirror.yaml"]
