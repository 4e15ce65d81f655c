"""Layer 3, Airflow: hooks (state store, index, per-service connections), operators and triggers,
the DAG factory, the failure callbacks and reaper oracles (callbacks.py), the CLI with Airflow's view
of DAG runs (cli.py), the audit UI and the demo. The engine below receives what Airflow knows as
plain callables and values.
"""
