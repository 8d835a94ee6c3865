# Strata api and worker image (one image, two commands; see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    STRATA_DATA_DIR=/data

WORKDIR /srv/strata
COPY pyproject.toml constraints.txt README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
# Editable, so that the migrations beside the package are found at run time.
RUN pip install -c constraints.txt -e . && useradd --create-home strata && mkdir -p /data && chown strata /data
USER strata

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz').status != 200)"
CMD ["uvicorn", "--factory", "app.main:create_app", "--host", "0.0.0.0", "--port", "8000"]
