FROM python:3.11-slim
ENV TZ=UTC PYTHONUNBUFFERED=1 ERRORTRACK_DATA_DIR=/var/lib/errortrack
WORKDIR /app
COPY . /app
# Editable install: the DDL (clickhouse/) and Alembic migrations (migrations/) are read
# from the source tree next to the package.
RUN pip install --no-cache-dir -e '.[openapi]'
EXPOSE 8000
CMD ["errortrack", "serve", "--host", "0.0.0.0", "--port", "8000"]
