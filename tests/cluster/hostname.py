"""``[core] hostname_callable`` for the cluster test: both Celery workers run on this one
machine, so each is given its own name (``TRIBUTARY_CLUSTER_HOSTNAME``) and task instances
record which worker ran them, as they would on two hosts."""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    return os.environ.get("TRIBUTARY_CLUSTER_HOSTNAME") or socket.getfqdn()
