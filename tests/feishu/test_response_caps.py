"""Every body the Feishu client reads is capped while it streams, after its content-coding
("every size a server controls is capped"): the simulator pads its answers past the limit
(plain, or gzip so that only the decoded size is large) or serves a gzip-of-gzip download,
and the client refuses them with a final typed error naming the endpoint and the limit."""

from __future__ import annotations

import asyncio
import json

import pytest

from plugins.connectors.feishu.answers import DEFAULT_MAX_RESPONSE_BYTES
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from plugins.connectors.feishu.errors import FeishuNotFoundError, FeishuResponseTooLarge
from plugins.connectors.feishu.exports import AsyncExportPoller, ExportTicket
from plugins.tributary_airflow.hooks.feishu import settings_from_connection
from tests.feishu.child_call import GIB, call_in_child
from tests.simulators.feishu import FeishuSimulator

MIB = 1024 * 1024
ROOT_META = "/drive/explorer/v2/root_folder/meta"


def _pad(sim: FeishuSimulator, size: int, where: str, *, gzip: bool = False, errors: bool = False) -> None:
    """Pad the answers of the paths that contain ``where`` past ``size`` bytes."""
    sim.hostile.pad_json, sim.hostile.pad_gzip, sim.hostile.pad_errors = size, gzip, errors
    sim.hostile.only = lambda path: where in path


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_a_json_answer_over_the_connection_limit_is_refused_and_not_retried(sim, sim_url, monkeypatch, gzipped):
    extra = {"max_response_bytes": MIB}
    conn = {"conn_type": "http", "login": sim.app_id, "password": sim.app_secret, "host": sim_url, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_FEISHU_DEFAULT", json.dumps(conn))
    _pad(sim, 16 * MIB, ROOT_META, gzip=gzipped)  # a gzip body is ~16 KiB on the wire
    with (
        FeishuClient(settings_from_connection("feishu_default")) as client,
        pytest.raises(FeishuResponseTooLarge) as info,
    ):
        client.root_folder_token()
    err = info.value
    assert (err.endpoint, err.limit, err.retryable) == (ROOT_META, MIB, False)
    assert ROOT_META in str(err) and str(MIB) in str(err)
    assert sim.counters["root_meta_requests"] == sim.hostile.served == 1  # final: asked once


def test_the_default_limit_is_64_mib_and_answers_under_it_pass(sim, settings):
    assert DEFAULT_MAX_RESPONSE_BYTES == settings.max_response_bytes == 64 * MIB
    _pad(sim, 2 * MIB, ROOT_META, gzip=True)
    token = sim.add("file", "notes.txt", content=b"plain text " * 1000)
    with FeishuClient(settings) as client:
        assert client.root_folder_token() == sim.root_token
        assert client.download_file(token, max_bytes=MIB).data == b"plain text " * 1000
    small = FeishuSettings(**{**_fields(settings), "max_response_bytes": MIB})
    with FeishuClient(small) as client, pytest.raises(FeishuResponseTooLarge):
        client.root_folder_token()


# Past the default cap (64 MiB), gzip-compressed: ~70 KiB on the wire.
OVER_DEFAULT = 65 * MIB


@pytest.mark.parametrize("auth", ["tenant", "user"])
def test_a_token_answer_is_capped_at_the_default_limit(sim, settings, auth, secret_key):
    path = "/auth/v3/tenant_access_token/internal" if auth == "tenant" else "/authen/v2/oauth/token"
    refresh = sim.grant_user() if auth == "user" else None
    as_user = FeishuSettings(**{**_fields(settings), "auth": auth, "refresh_token": refresh})
    _pad(sim, OVER_DEFAULT, path, gzip=True)
    with FeishuClient(as_user) as client, pytest.raises(FeishuResponseTooLarge) as info:
        client.root_folder_token()
    assert (info.value.endpoint, info.value.limit) == (path, 64 * MIB)


def test_an_export_poll_answer_is_capped_at_the_default_limit(sim, settings, client):
    doc = sim.add("docx", "Spec", content="# Spec\nbody")
    ticket = ExportTicket(doc, "docx", "docx", client.create_export(doc, "docx", "docx"))
    _pad(sim, OVER_DEFAULT, f"/export_tasks/{ticket.ticket}", gzip=True)

    async def poll() -> dict:
        poller = AsyncExportPoller(settings, client=client)
        try:
            return await poller.poll(ticket)
        finally:
            await poller.aclose()

    with pytest.raises(FeishuResponseTooLarge) as info:
        asyncio.run(poll())
    assert (info.value.endpoint, info.value.limit) == (f"/drive/v1/export_tasks/{ticket.ticket}", 64 * MIB)
    assert sim.counters["export_polls"] == 1


def test_an_error_answer_is_read_up_to_64_kib_and_still_typed_by_its_status(sim, client):
    # the padding comes first: the code and msg behind 16 MiB of it are never read, the 404 counts
    folder = sim.add_folder("gone")
    sim.trash(folder)
    _pad(sim, 16 * MIB, "/drive/v1/files", errors=True)
    with pytest.raises(FeishuNotFoundError) as listing:
        list(client.list_folder(folder))
    with pytest.raises(FeishuNotFoundError) as download:
        client.download_file("boxcnNoSuchFile00000000000", max_bytes=MIB)
    for err in (listing.value, download.value):
        assert (err.status, err.code, err.args[0]) == (404, None, "HTTP 404")  # not the sim's "not found"
    assert sim.hostile.served == 2


def test_a_gzip_of_gzip_download_is_cut_at_the_file_cap_in_a_capped_child(sim, settings):
    # 1 GiB of zeros, ~2 KiB on the wire: httpx's iter_bytes() would inflate it in one chunk.
    # The child runs under a 1.5 GB address space, so a regression fails there, not here.
    sim.hostile.bomb_downloads = GIB
    token = sim.add("file", "bomb.bin", content=b"small")
    fields = {"app_id": settings.app_id, "app_secret": settings.app_secret, "host": settings.host, "max_attempts": 1}
    outcome = call_in_child(fields, file_token=token, max_bytes=MIB)
    assert outcome["error"] == "FeishuResponseTooLarge", outcome
    assert (outcome["limit"], outcome["retryable"]) == (MIB, False)
    assert f"/drive/v1/files/{token}/download" in outcome["message"]


def _fields(settings: FeishuSettings) -> dict:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}
