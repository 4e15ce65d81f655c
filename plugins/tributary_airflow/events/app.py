"""The callback receiver: the only Tributary routes without an Airflow login.

Mounted at ``/tributary/events`` in Airflow's API server (``plugins/tributary_plugin.py``, listed
before the audit app at ``/tributary``: Airflow mounts plugin apps in list order and Starlette
takes the first mount whose prefix matches, so the audit app never sees these paths and the
receiver never sees the audit app's).

  POST /feishu/{name}             a Feishu/Lark event callback (challenge, encrypted or plain event)
  POST /yuque/{name}?secret=...   a Yuque webhook

For a source that is not configured, is of another kind or has ``events.mode`` other than
``callback``, and for every other method and path, the answer is the same bare 404 as for a
path that does not exist: these routes tell a caller nothing about what is configured. Then,
in this order: the Yuque URL secret; the body, read up to the source's ``max_body_bytes``
(413 past it, the rest unread); Feishu's signature, decryption, token and timestamps
(``plugins/connectors/feishu/events.py``) or Yuque's body (``.../yuque/events.py``); the rate
limit, only for what authenticated (a forger cannot spend a source's budget); the store; 200.
A refusal is counted (``refused:<reason>``) and answered with its one-word reason and nothing
more. Storing is the last step before the answer and nothing slower follows it: Feishu wants
its 200 within 3 s, and the event is durable before it is acknowledged, so a scheduler or
worker that is down loses nothing (the triggerer picks stored events up: see
``include/stores/events.py``). A store that fails answers 503, so the service retries.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from include.config import SourceConfig
from include.event_refusals import EventRefused
from include.stores.events import EventHint
from plugins.connectors.feishu.events import FeishuSecrets, read_callback
from plugins.connectors.yuque.events import check_secret, read_webhook
from plugins.tributary_airflow.events.intake import Intake, read_capped

__all__ = ["create_events_app"]

log = logging.getLogger("tributary.events")

_NOT_FOUND = {"detail": "Not Found"}


def _refusal(exc: EventRefused) -> JSONResponse:
    return JSONResponse({"detail": exc.reason}, status_code=exc.status)


async def _not_found(request: Request, exc: Exception) -> Response:
    """Every HTTP error of the framework (404, 405 for a GET...) is the same bare 404."""
    return JSONResponse(_NOT_FOUND, status_code=404)


async def _store(intake: Intake, source: SourceConfig, hint: EventHint) -> Response:
    await intake.admit(source)
    try:
        result = await intake.record(source, hint)
    except Exception as exc:  # the state database is down: the service must retry later
        log.error("events %s: storing failed (%s)", source.source_id, type(exc).__name__)
        return JSONResponse({"detail": "unavailable"}, status_code=503)
    return JSONResponse({"msg": "success", "duplicate": bool(result.duplicates)})


def create_events_app(intake: Intake | None = None) -> FastAPI:
    """The receiver app; ``intake`` for tests (default: configured sources, Connections, store)."""
    state = intake or Intake()
    app = FastAPI(title="Tributary events", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(StarletteHTTPException, _not_found)
    app.state.intake = state

    @app.post("/feishu/{name}")
    async def feishu(name: str, request: Request) -> Response:
        source = state.source("feishu", name)
        if source is None:
            return JSONResponse(_NOT_FOUND, status_code=404)
        try:
            extras = await state.extras(source)
            body = await read_capped(request, source.events.max_body_bytes)
            secrets = FeishuSecrets(
                verification_token=str(extras.get("verification_token") or ""),
                encrypt_key=str(extras["encrypt_key"]) if extras.get("encrypt_key") else None,
                app_id=extras.get("_login") or None,
            )
            callback = read_callback(
                body,
                secrets=secrets,
                timestamp=request.headers.get("x-lark-request-timestamp"),
                nonce=request.headers.get("x-lark-request-nonce"),
                sig=request.headers.get("x-lark-signature"),
                now=state.clock(),
                max_skew=source.events.max_skew_seconds,
            )
            if callback.hint is None:
                if callback.ignored:
                    await state.count(source, f"ignored:{callback.ignored}")
                return JSONResponse(callback.answer())
            return await _store(state, source, callback.hint)
        except EventRefused as exc:
            await state.refused(source, exc)
            return _refusal(exc)

    @app.post("/yuque/{name}")
    async def yuque(name: str, request: Request, secret: str | None = None) -> Response:
        source = state.source("yuque", name)
        if source is None:
            return JSONResponse(_NOT_FOUND, status_code=404)
        try:
            extras = await state.extras(source)
            check_secret(str(extras.get("webhook_secret") or ""), secret)
            body = await read_capped(request, source.events.max_body_bytes)
            webhook = read_webhook(body, now=state.clock(), max_skew=source.events.max_skew_seconds)
            if webhook.hint is None:
                await state.count(source, f"ignored:{webhook.ignored}")
                return JSONResponse({"msg": "ignored"})
            return await _store(state, source, webhook.hint)
        except EventRefused as exc:
            await state.refused(source, exc)
            return _refusal(exc)

    return app
