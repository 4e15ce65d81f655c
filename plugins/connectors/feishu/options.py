"""Options of a Feishu drive source (``SourceConfig.options`` for ``kind: feishu``).

Validated when the sources file is loaded (DAG parse), so a typo fails there, naming the key,
and again when the connector is built: the connector reads its options only through this model.
Kept free of the connector's imports: loading a sources file imports only this module's
dependencies (pydantic, ``include.config``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from include.config import EngineOptions

__all__ = ["FeishuClientOptions", "FeishuOptions", "FeishuSubscriptionOptions"]


class FeishuClientOptions(BaseModel):
    """``options.client``: HTTP client tuning (seconds, attempts)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    timeout: float | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, ge=1)
    rate_limit_max_wait: float | None = Field(default=None, ge=0)
    token_margin: float | None = Field(default=None, ge=0)


class FeishuSubscriptionOptions(BaseModel):
    """``options.subscriptions``: how the sync keeps drive event subscriptions (issue 37; only
    when the source's ``events`` are on with ``subscribe``). ``max_requests_per_run``: subscribe,
    re-check and unsubscribe requests one run may send (under a minute of the API's 1000/min;
    the rest wait for the next run); ``recheck_days``: a subscription confirmed longer ago is
    checked again with get_subscribe (and a failed one tried again)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    max_requests_per_run: int = Field(default=900, ge=1, le=100_000)
    recheck_days: float = Field(default=7.0, gt=0, le=365)


class FeishuOptions(EngineOptions):
    """``options`` of a ``kind: feishu`` source (see ``plugins/connectors/feishu/connector.py``).

    ``folders`` (folder tokens, ``root`` for the app's root folder), ``wiki_spaces`` (space ids,
    or ``all``), ``types`` (file types to sync), ``export_formats`` (type -> export extension),
    ``tenant_url`` (the tenant's web address, for document links), ``max_file_bytes``,
    ``docx_fetch`` (``export`` as .docx, or ``raw_content``: plain text in one call),
    ``docx_revision_check`` (compare docx revision ids, not only modified times), exports
    (``export_concurrency`` in flight, ``export_deadline_seconds``, ``export_poll_interval``,
    ``export_poll_max_interval``, ``deferrable``), ``client`` (:class:`FeishuClientOptions`),
    ``rate_limits`` (per-API ``[[max requests, window seconds], ...]`` overrides). Plus the
    engine's options.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    folders: list[str] = Field(default_factory=list)
    wiki_spaces: list[str] | str | None = None
    types: list[str] | None = None
    export_formats: dict[str, str] = Field(default_factory=dict)
    tenant_url: str | None = None
    max_file_bytes: int = Field(default=100 * 1024 * 1024, ge=1)
    export_deadline_seconds: float = Field(default=900, gt=0)
    export_poll_interval: float = Field(default=1.0, gt=0)
    export_poll_max_interval: float = Field(default=8.0, gt=0)
    # wait for exports in the triggerer (true) or poll in the task (false); unset: Airflow's
    # ``[operators] default_deferrable`` decides, as it does for the providers' operators
    deferrable: bool | None = None
    # H8 (issue 20): in-task exports in flight at once; docx via raw_content (text, one call);
    # a changed modified_time re-checked against docx revision_id before re-fetching.
    export_concurrency: int = Field(default=20, ge=1, le=200)
    docx_fetch: Literal["export", "raw_content"] = "export"
    docx_revision_check: bool = False
    # deferred path: resume to download finished exports once one has waited this long
    export_resume_after_done_seconds: float | None = Field(default=120, gt=0)
    client: FeishuClientOptions = Field(default_factory=FeishuClientOptions)
    rate_limits: dict[str, list[tuple[int, float]]] = Field(default_factory=dict)
    subscriptions: FeishuSubscriptionOptions = Field(default_factory=FeishuSubscriptionOptions)
