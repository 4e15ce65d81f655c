#!/usr/bin/env bash
# The benchmark environment: the project's requirements plus the peers we compare against
# (Scrapy, markitdown, chonkie, langchain-text-splitters), kept out of the runtime venv.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv-bench/.installed
if [ -f "$stamp" ] && [ "$stamp" -nt requirements.txt ] && [ "$stamp" -nt benchmarks/requirements.txt ]; then exit 0; fi
test -x .venv-bench/bin/python || python3.11 -m venv .venv-bench
.venv-bench/bin/pip install --quiet -r requirements.txt -r benchmarks/requirements.txt -c constraints.txt
.venv-bench/bin/python -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'tributary.pth').write_text('$PWD\n')"
touch "$stamp"
