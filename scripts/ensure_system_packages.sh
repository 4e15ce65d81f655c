#!/usr/bin/env bash
# Debian packages the tests use: nginx (real ETag/304 server), LibreOffice (office fixtures,
# legacy .doc/.xls conversion), Chromium (UI screenshots), tesseract (OCR). Installs only what is missing.
set -euo pipefail
need=()
# a Debian package counts only when dpkg says it is installed: LibreOffice's binary is there with
# Writer and Calc alone, and the Impress tests then failed on a machine that installed nothing
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
want() {  # want PACKAGE [a command or path that also counts where dpkg is absent]
  if command -v dpkg-query >/dev/null 2>&1; then installed "$1" && return 0
  elif [ -n "${2:-}" ] && { command -v "$2" >/dev/null 2>&1 || [ -e "$2" ]; }; then return 0; fi
  need+=("$1")
}
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)  # any nginx flavour serves the tests
want libreoffice-writer soffice
want libreoffice-calc soffice
want libreoffice-impress soffice
want chromium chromium
[ -d /usr/share/doc/python3/html ] || [ -d /usr/share/doc/python3-doc ] || need+=(python3-doc)
# the Chinese query set of the retrieval benchmark (benchmarks/retrieval.py)
[ -d /usr/share/doc/debian/FAQ/zh-cn ] || need+=(debian-faq-zh-cn)
# the crawl and sync benchmarks' second, larger site (benchmarks/crawl.py): PostgreSQL's HTML manual
[ -d /usr/share/doc/postgresql-doc-15/html ] || need+=(postgresql-doc-15)
# a compose client (no engine): tests/cluster/test_compose.py renders docker-compose.yaml with it
command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || need+=(docker-compose)
# OCR (plugins/parsers/_ocr.py): the engine and its Chinese and English models, as Debian packages
command -v tesseract >/dev/null 2>&1 || need+=(tesseract-ocr)
[ -f /usr/share/tesseract-ocr/5/tessdata/chi_sim.traineddata ] || need+=(tesseract-ocr-chi-sim)
[ -f /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ] || need+=(tesseract-ocr-eng)
# a CJK font, so LibreOffice-made Chinese PDFs (OCR tests and benchmark) carry Chinese glyphs
fc-list :lang=zh 2>/dev/null | grep -q . || need+=(fonts-wqy-microhei)
if [ ${#need[@]} -eq 0 ]; then echo "system packages: all present"; exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "system packages missing (${need[*]}); install them with apt-get as root — dependent tests will be skipped" >&2
  exit 0
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
