-- Runs once, on the first start of an empty data volume: the database for Tributary's
-- state store and run log, beside Airflow's metadata database (POSTGRES_DB).
CREATE DATABASE tributary;
