# syntax=docker/dockerfile:1
# Takeover: one image for web, worker and beat (compose.yaml, Procfile). Multi-stage: the
# build stage makes a virtualenv from the hash-locked runtime dependencies
# (requirements/runtime.txt: no embedded PostgreSQL, no test tools); the runtime stage (the
# default target) copies it and the code, and runs as an unprivileged user with DATABASE_URL.
# `docker build --target dev .` is the development image: the same, plus the embedded
# PostgreSQL and the test tools (requirements/dev.txt), for `make run` and `make test`.

FROM python:3.11-slim-bookworm AS base
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=takeover.settings \
    TAKEOVER_VAR_DIR=/var/lib/takeover \
    LOG_FORMAT=json \
    PORT=8000
RUN groupadd --system --gid 10001 takeover \
    && useradd --system --uid 10001 --gid takeover --home-dir /app --shell /usr/sbin/nologin takeover \
    && mkdir -p /var/lib/takeover \
    && chown takeover:takeover /var/lib/takeover
WORKDIR /app

FROM base AS build
# Dependencies first: a code change does not re-install them.
COPY requirements/runtime.txt /tmp/requirements/runtime.txt
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-compile --require-hashes -r /tmp/requirements/runtime.txt

FROM build AS dev-build
COPY requirements/dev.txt /tmp/requirements/dev.txt
RUN /opt/venv/bin/pip install --no-compile --require-hashes -r /tmp/requirements/dev.txt

FROM base AS dev
COPY --from=dev-build /opt/venv /opt/venv
COPY --chown=root:root . .
RUN /opt/venv/bin/pip install --no-compile --no-deps --no-build-isolation -e ./client
USER 10001:10001
EXPOSE 8000
ENV LOG_FORMAT=text
CMD ["python", "-m", "takeover.launcher"]

FROM base AS runtime
COPY --from=build /opt/venv /opt/venv
COPY --chown=root:root . .
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('PORT', '8000'), timeout=4)"]
# --no-control-socket: gunicorn's default ~/.gunicorn/gunicorn.ctl is shared between stacks.
CMD ["sh", "-c", "exec gunicorn -c python:takeover.gunicorn_conf takeover.wsgi -b 0.0.0.0:${PORT} -k gthread --threads 8 -w 2 --no-control-socket --access-logfile - --forwarded-allow-ips=${FORWARDED_ALLOW_IPS:-127.0.0.1}"]
