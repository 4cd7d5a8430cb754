FROM python:3.11-slim
ENV TZ=UTC PYTHONUNBUFFERED=1 ERRORTRACK_DATA_DIR=/var/lib/errortrack
WORKDIR /app
COPY . /app
# Editable install: the DDL (clickhouse/) and Alembic migrations (migrations/) are read
# from the source tree next to the package.
RUN pip install --no-cache-dir -e '.[openapi]'
# The server runs as an unprivileged user that owns only its data dir (the spool, and on
# the embedded default the SQLite file and chDB's store): a flaw in the server or in
# chDB then cannot rewrite the code or the image. The data dir exists in the image, owned
# by that user, so a new named volume mounted there starts with that owner. A fixed uid
# lets a bind mount be chowned to it on the host (`chown -R 10001:10001 <dir>`).
RUN useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /var/lib/errortrack --shell /usr/sbin/nologin errortrack \
    && mkdir -p /var/lib/errortrack \
    && chown errortrack:errortrack /var/lib/errortrack
USER errortrack
EXPOSE 8000
CMD ["errortrack", "serve", "--host", "0.0.0.0", "--port", "8000"]
