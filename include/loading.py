"""Find a class by its dotted path, as Scrapy's ``load_object`` does.

Registries name what they hold (``"include.index.sqlite_fts:SqliteFtsIndex"``) instead of
importing it, so that importing a registry loads none of its entries: a backend or a connector
pulls in its libraries only when it is asked for, and a layer can name a module it must not
import at its top.
"""

from __future__ import annotations

import importlib
from typing import TypeVar

__all__ = ["load_class"]

T = TypeVar("T")


def load_class(path: str, base: type[T]) -> type[T]:
    """The class at ``path`` (``"package.module:Class"``), which must be a subclass of ``base``.

    ``ImportError`` when the module does not import, ``TypeError`` when the attribute is missing
    or not such a class: either way the message names ``path``.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not a 'module:Class' path")
    found = getattr(importlib.import_module(module_name), attr, None)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise TypeError(f"{path} is not a {base.__module__}.{base.__qualname__}")
    return found
