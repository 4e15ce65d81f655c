# Tributary — the two commands: `make run` (demo sync end to end) and `make test`.
# Both are idempotent: they create/refresh the virtualenv only when requirements change.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export PYTHONPATH := $(CURDIR)

.PHONY: run test ui venv system services lint bench clean

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	# one import scheme everywhere: the project root is on sys.path (include.*, plugins.*)
	$(PY) -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'tributary.pth').write_text('$(CURDIR)\n')"
	touch $(STAMP)

## make run: install, migrate Airflow's DB, serve the demo site, run sync_web_demo in Airflow, search
run: venv
	$(PY) -m plugins.tributary_airflow.demo.run

## make ui: Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1:8080 with the
## Tributary pages at /tributary/, and the demo site; Ctrl-C stops everything
ui: venv
	bash scripts/ui.sh

## make test: install what is missing (venv, Debian packages, services), lint, run the whole suite
## (TEST_WORKERS=1 for a serial run; each xdist worker has its own AIRFLOW_HOME and Redis db)
TEST_WORKERS ?= 2
test: venv system services lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

system:
	bash scripts/ensure_system_packages.sh

services:
	bash scripts/ensure_services.sh

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

## make bench NAME=crawl: one benchmark (peers installed into .venv-bench only)
bench: venv
	bash scripts/bench_env.sh
	.venv-bench/bin/python -m benchmarks $(NAME)

clean:
	rm -rf .tributary .airflow
