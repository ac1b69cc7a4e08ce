# The same steps as the README: system packages, the package, then the service.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends ripgrep && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir -e .
ENV LOGTRIAGE_DATA_DIR=/data
VOLUME /data
EXPOSE 8000
# Without tokens the service answers loopback only: create one (`logtriage tokens create`) for remote hooks.
CMD ["logtriage", "serve", "--host", "0.0.0.0"]
