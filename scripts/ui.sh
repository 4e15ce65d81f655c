#!/usr/bin/env bash
# `make ui`: Airflow 3 (api-server with the Tributary pages, scheduler, dag-processor, triggerer)
# on 127.0.0.1 only, on the same embedded defaults as `make run`, plus the demo site, so the
# sync_web_demo DAG (and the Sync now / Full resync buttons of its source page) can run.
# Stop with Ctrl-C: every process started here is stopped with it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT="${TRIBUTARY_UI_PORT:-8080}"
DEMO_PORT="${TRIBUTARY_DEMO_PORT:-8765}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags" AIRFLOW__CORE__PLUGINS_FOLDER="$PWD/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False PYTHONPATH="$PWD"
export TRIBUTARY_DEMO_URL="http://127.0.0.1:${DEMO_PORT}/"
# two cores: a handful of task processes at a time, not Airflow's default 32
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG="${AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG:-2}"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:${PORT}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:${PORT}/execution/"
LOGS="$AIRFLOW_HOME/ui-logs"
mkdir -p "$LOGS"
# the components sign and check each other's tokens with one secret: made once, kept (mode 600)
SECRETS="$AIRFLOW_HOME/ui-secrets.env"
if [ ! -f "$SECRETS" ]; then
  (umask 077; $PY -c 'import secrets; print(f"AIRFLOW__API_AUTH__JWT_SECRET={secrets.token_urlsafe(32)}\nAIRFLOW__API__SECRET_KEY={secrets.token_urlsafe(32)}")' >"$SECRETS")
fi
set -a; . "$SECRETS"; set +a

$PY -m airflow db migrate >"$LOGS/migrate.log" 2>&1 || { tail -40 "$LOGS/migrate.log"; exit 1; }

pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT INT TERM
$PY -m plugins.tributary_airflow.demo.serve --port "$DEMO_PORT" >"$LOGS/demo-site.log" 2>&1 & pids+=($!)
$PY -m airflow api-server -H 127.0.0.1 -p "$PORT" >"$LOGS/api-server.log" 2>&1 & pids+=($!)
for component in scheduler dag-processor triggerer; do
  $PY -m airflow "$component" >"$LOGS/$component.log" 2>&1 & pids+=($!)
done

for _ in $(seq 120); do
  curl -fsS "http://127.0.0.1:${PORT}/api/v2/version" >/dev/null 2>&1 && break
  sleep 1
done
passwords="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
cat <<MSG

Airflow:          http://127.0.0.1:${PORT}/
Tributary pages:  http://127.0.0.1:${PORT}/tributary/   (sources, runs, items, search)
Log in as:        admin, password in ${passwords}
Demo site:        ${TRIBUTARY_DEMO_URL}
Logs:             ${LOGS}/
Stop:             Ctrl-C
MSG
wait -n "${pids[@]}"
