"""Parser test helpers: LibreOffice conversion (skipped with a reason when soffice is absent)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from include.contract import ParsedDocument, RawDocument
from plugins.parsers import parse_document

# ../shared/realdocs beside the repository: real third-party documents, read in place, never copied
REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"


def realdoc(rel: str) -> bytes:
    """The bytes of ``../shared/realdocs/<rel>``; the test is skipped when the corpus is absent."""
    path = REALDOCS / rel
    if not path.exists():
        pytest.skip(f"{path} absent (the real-document corpus is not on this machine)")
    return path.read_bytes()


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "parsers"
SOFFICE = shutil.which("soffice")
needs_soffice = pytest.mark.skipif(
    SOFFICE is None,
    reason="LibreOffice (soffice) not installed: apt-get install libreoffice-writer libreoffice-calc libreoffice-impress",
)


def parse_bytes(data: bytes, name: str, declared: str | None = None, **options: object) -> ParsedDocument:
    return parse_document(RawDocument("k", data, name, media_type=declared), options)


@pytest.fixture(scope="session")
def lo_convert(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bytes, str, str], bytes]:
    """``lo_convert(data, src_ext, target)`` -> converted bytes, cached for the session."""
    if SOFFICE is None:
        print("SKIP reason: soffice not installed; LibreOffice-generated fixtures unavailable")
        pytest.skip("LibreOffice (soffice) not installed")
    root = tmp_path_factory.mktemp("lo")
    profile = root / "profile"
    cache: dict[str, bytes] = {}

    def convert(data: bytes, src_ext: str, target: str) -> bytes:
        key = hashlib.sha256(data + src_ext.encode() + target.encode()).hexdigest()[:16]
        if key in cache:
            return cache[key]
        work = root / key
        work.mkdir()
        src = work / f"in.{src_ext}"
        src.write_bytes(data)
        ext = target.split(":")[0]
        result = work / "out" / f"in.{ext}"
        # a fresh LibreOffice profile sometimes exits without converting on first start: retry
        for _ in range(3):
            subprocess.run(
                [
                    SOFFICE,
                    "--headless",
                    "--norestore",
                    f"-env:UserInstallation={profile.as_uri()}",
                    "--convert-to",
                    target,
                    "--outdir",
                    str(work / "out"),
                    str(src),
                ],
                check=True,
                capture_output=True,
                timeout=180,
            )
            if result.exists():
                break
        out = result.read_bytes()
        cache[key] = out
        return out

    return convert
