"""include.loading.load_class: registries find their entries by dotted path."""

from __future__ import annotations

import pytest

from include.index import IndexBackend
from include.index.sqlite_fts import SqliteFtsIndex
from include.loading import load_class


def test_a_dotted_path_gives_its_class() -> None:
    assert load_class("include.index.sqlite_fts:SqliteFtsIndex", IndexBackend) is SqliteFtsIndex


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("include.index.sqlite_fts.SqliteFtsIndex", ValueError, "not a 'module:Class' path"),
        ("include.index.sqlite_fts:Missing", TypeError, "include.index.sqlite_fts:Missing is not a"),
        ("include.index.base:DocumentWrite", TypeError, "is not a include.index.base.IndexBackend"),
        ("include.no_such_module:Thing", ModuleNotFoundError, "include.no_such_module"),
    ],
)
def test_a_bad_path_names_itself(path: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_class(path, IndexBackend)
