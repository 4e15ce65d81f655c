"""A local S3 server on loopback (moto's ``ThreadedMotoServer``) and the Airflow Connection for it.

Staging in object storage is tested against a real HTTP S3 endpoint: s3fs signs and sends real
requests (PUT, HEAD, ListObjectsV2, DeleteObjects) to moto's server on 127.0.0.1, so the code
path is the one a deployment on S3, MinIO or Ceph runs. The connection is handed to Airflow the
way a deployment may (``AIRFLOW_CONN_<ID>``, JSON with ``endpoint_url`` in ``extra``); the keys
are moto's placeholders, not secrets.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
from moto.server import ThreadedMotoServer

from tests.support.server import free_port

__all__ = ["S3Server", "s3_server"]


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str

    def connection_env(self, conn_id: str) -> dict[str, str]:
        """``AIRFLOW_CONN_<ID>``: an ``aws`` connection pointed at this server."""
        conn = {
            "conn_type": "aws",
            "login": "moto-key",
            "password": "moto-secret",
            "extra": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (read with boto3, not through the code under test)."""
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="moto-key",
            aws_secret_access_key="moto-secret",
        )
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


@contextmanager
def s3_server(bucket: str = "tributary-staging") -> Iterator[S3Server]:
    """A moto S3 server on a free loopback port with one empty bucket."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s3 = S3Server(f"http://127.0.0.1:{port}", bucket)
        boto3.client(
            "s3",
            endpoint_url=s3.endpoint,
            region_name="us-east-1",
            aws_access_key_id="moto-key",
            aws_secret_access_key="moto-secret",
        ).create_bucket(Bucket=bucket)
        yield s3
    finally:
        server.stop()


@contextmanager
def s3_connection(conn_id: str) -> Iterator[S3Server]:
    """:func:`s3_server` with its Airflow Connection ``conn_id`` in the environment meanwhile."""
    with s3_server() as server:
        saved = {k: os.environ.get(k) for k in server.connection_env(conn_id)}
        os.environ.update(server.connection_env(conn_id))
        try:
            yield server
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
