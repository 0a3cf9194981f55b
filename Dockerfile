# syntax=docker/dockerfile:1
# One image for every role: the Dagster code server, run and step workers (`lake dagster api ...`),
# the daemon and webserver on ECS (`lake dagster-daemon run`, `lake dagster-webserver ...`), Flight
# SQL replicas (`lake serve-flight`) and the REST catalog (`lake serve-rest`). docs/deploy.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: a virtualenv with the project and exactly the versions requirements.lock pins ------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 UV_NO_CACHE=1
RUN python -m venv /opt/lake && /opt/lake/bin/pip install "uv==0.13.9"
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY lake_platform ./lake_platform
COPY dagster.yaml workspace.yaml ./
# The lock covers the dev extra too; as a constraint it pins versions without installing the
# test tools. Every dependency ships wheels for this platform, so no compiler is needed at all.
# Bytecode is compiled here and kept: the image runs with PYTHONDONTWRITEBYTECODE (and may be
# read-only), so without it every command, replica and Dagster run worker would compile what it
# imports at start, about twice the start-up.
RUN /opt/lake/bin/uv pip install --compile-bytecode --python /opt/lake/bin/python --constraint requirements.lock . \
    && /opt/lake/bin/uv pip uninstall --python /opt/lake/bin/python uv pip \
    && cp dagster.yaml workspace.yaml /opt/lake/

# -- run: the runtime only, as an unprivileged user ---------------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 lake \
    && useradd --system --uid 10001 --gid lake --home-dir /home/lake --create-home lake
COPY --from=build /opt/lake /opt/lake
ENV PATH=/opt/lake/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DAGSTER_HOME=/home/lake/dagster \
    DAGSTER_DISABLE_TELEMETRY=1 \
    LAKE_HOME=/home/lake/.lake
RUN mkdir -p /home/lake/dagster && cp /opt/lake/dagster.yaml /home/lake/dagster/dagster.yaml \
    && chown -R lake:lake /home/lake
USER 10001:10001
WORKDIR /home/lake
# Flight SQL (50051), REST catalog (2333), Dagster code server (3030).
EXPOSE 50051 2333 3030
ENTRYPOINT ["lake"]
CMD ["--help"]
