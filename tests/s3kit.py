"""A real S3 API on 127.0.0.1 for the S3 blob-store tests: moto's server mode.

moto fakes the external service at the outside edge only: the app talks to it over HTTP with its
real S3 client (obstore), exactly as to AWS or MinIO. Tests inspect the bucket with boto3 (a moto
dependency). Without moto or obstore the S3 tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import importlib.util
import secrets
from typing import Any

from tests import lanes

REGION = "us-east-1"
# credentials the app's S3 client reads from the standard AWS environment (moto accepts any)
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "lt-test-key",
    "AWS_SECRET_ACCESS_KEY": "lt-test-secret",
    "AWS_REGION": REGION,
}
S3_ENV_CLEARED = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT", "AWS_ENDPOINT_URL")


def s3_unavailable() -> str | None:
    """None when the S3 tests can run, else why not."""
    missing = [m for m in ("moto", "obstore", "boto3") if importlib.util.find_spec(m) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (pip install -e '.[dev]')"
    return None


class MotoS3:
    """moto's S3 server in a thread, bound to 127.0.0.1 on a free port."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def start(self) -> MotoS3:
        lanes.require_slow("a moto S3 server")
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
        )

    def new_bucket(self) -> str:
        name = f"lt-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def get(self, bucket: str, key: str) -> bytes:
        body: bytes = self.client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def head(self, bucket: str, key: str) -> dict[str, Any]:
        meta: dict[str, Any] = self.client().head_object(Bucket=bucket, Key=key)
        return meta
