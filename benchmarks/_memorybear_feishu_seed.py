"""The seed's Feishu client as the MemoryBear chapter and the reference describe it
(``api/app/core/rag/integrations/feishu/client.py`` + ``retry.py``), kept faithful on purpose,
faults included — a peer for ``benchmarks/feishu.py``:

- tenant token cached per process in ``TTLCache(maxsize=1, ttl=7200-300)`` behind an
  ``asyncio.Lock`` with double-check (``expire`` ignored, never invalidated on 99991663);
- ``_export_file``: create the task, then poll ``export_tasks/:ticket?token=`` **10 times, 2 s
  apart**, stopping as soon as ``result.file_token`` is non-empty — ``job_status`` is not
  inspected, so a failed export just runs out the 20 s and raises;
- ``with_retry``: up to 3 retries with 1 s, 2 s, 4 s waits on network errors, HTTP 429/5xx and
  codes 99991400/99991401 (``x-ogw-ratelimit-reset`` is not read);
- documents are processed one after another, as the seed's sync task loops over them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from cachetools import TTLCache

_RETRY_DELAYS = (1, 2, 4)


class SeedFeishuError(Exception):
    pass


class SeedFeishuClient:
    def __init__(self, app_id: str, app_secret: str, api_base_url: str, timeout: int = 30) -> None:
        self.app_id, self.app_secret = app_id, app_secret
        self._http = httpx.AsyncClient(base_url=api_base_url.rstrip("/") + "/open-apis", timeout=timeout)
        self._token_cache: TTLCache = TTLCache(maxsize=1, ttl=7200 - 300)
        self._token_lock = asyncio.Lock()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get_tenant_access_token(self) -> str:
        cached = self._token_cache.get("access_token")
        if cached:
            return cached
        async with self._token_lock:
            cached = self._token_cache.get("access_token")
            if cached:
                return cached
            resp = await self._http.post(
                "/auth/v3/tenant_access_token/internal", json={"app_id": self.app_id, "app_secret": self.app_secret}
            )
            data = resp.json()
            if data.get("code") != 0:
                raise SeedFeishuError(f"Authentication failed: {data.get('msg')}")
            token = data.get("tenant_access_token")
            self._token_cache["access_token"] = token
            return token

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(len(_RETRY_DELAYS) + 1):
            token = await self.get_tenant_access_token()
            try:
                resp = await self._http.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
            except httpx.TransportError:
                if attempt == len(_RETRY_DELAYS):
                    raise
                await asyncio.sleep(_RETRY_DELAYS[attempt])
                continue
            code = None
            if resp.headers.get("content-type", "").startswith("application/json"):
                code = resp.json().get("code")
            if (resp.status_code == 429 or resp.status_code >= 500 or code in (99991400, 99991401)) and attempt < len(
                _RETRY_DELAYS
            ):
                await asyncio.sleep(_RETRY_DELAYS[attempt])
                continue
            return resp
        raise AssertionError("unreachable")

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        resp = await self._request(method, path, **kwargs)
        data = resp.json()
        if data.get("code") != 0:
            raise SeedFeishuError(f"API error {data.get('code')}: {data.get('msg')}")
        return data.get("data") or {}

    async def export_file(self, token: str, doc_type: str) -> bytes:
        ext = {"docx": "docx", "doc": "doc", "sheet": "xlsx", "bitable": "xlsx"}[doc_type]
        created = await self._json(
            "POST", "/drive/v1/export_tasks", json={"file_extension": ext, "token": token, "type": doc_type}
        )
        ticket = created["ticket"]
        for _ in range(10):
            result = (await self._json("GET", f"/drive/v1/export_tasks/{ticket}", params={"token": token})).get(
                "result"
            ) or {}
            if result.get("file_token"):
                resp = await self._request("GET", f"/drive/v1/export_tasks/file/{result['file_token']}/download")
                return resp.content
            await asyncio.sleep(2)
        raise SeedFeishuError(f"Export task did not complete in time: {ticket}")
