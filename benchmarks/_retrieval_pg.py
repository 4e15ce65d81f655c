"""The retrieval benchmark's PostgreSQL set: plain-language questions over the PostgreSQL 15 manual.

The questions and their answer pages were written by hand from the manual's table of contents
(Debian ``postgresql-doc-15``, ``html/*.html``) before any search ran on them, and not changed
after: this set was held out while the fusion rule was chosen on the FAQ sets (the rule is then
chosen again with each set held out in turn, ``benchmarks/_retrieval_fusion.py``). A question
lists every page that answers it; a hit on any of them counts. The pages are indexed whole, as a
crawl of the manual would index them; distractors are a seeded sample of the manual's other
pages (release notes and the SPI/ECPG/infoschema reference pages excluded: hundreds of near-empty
pages that would crowd the sample).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PG_EXCLUDED_PREFIXES", "PG_MANUAL", "PG_QUESTIONS"]

PG_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
PG_EXCLUDED_PREFIXES = ("release-", "spi-spi-", "ecpg-sql-", "infoschema-", "contrib-dblink-", "bookindex")

# question -> the pages (file names without .html) that answer it
PG_QUESTIONS: dict[str, tuple[str, ...]] = {
    "How can I see the plan the database chooses for my query and how long each step takes?": (
        "sql-explain",
        "using-explain",
    ),
    "How do I make a copy of a whole database into a file I can restore later?": ("app-pgdump", "backup-dump"),
    "What is the quickest way to load a large CSV file into a table?": ("sql-copy", "populate"),
    "How do I stop users from seeing rows that belong to other customers in a shared table?": (
        "ddl-rowsecurity",
        "sql-createpolicy",
    ),
    "Why does my table keep growing after lots of updates and deletes, and how is the space reclaimed?": (
        "routine-vacuuming",
        "sql-vacuum",
    ),
    "How do I split one huge table into smaller pieces by date range?": ("ddl-partitioning",),
    "How do I store and query documents in a flexible key-value format?": (
        "datatype-json",
        "functions-json",
        "hstore",
    ),
    "How can I search text for words regardless of their endings, like a search engine does?": (
        "textsearch-intro",
        "textsearch-controls",
    ),
    "How do I run a function automatically every time a row is inserted?": (
        "sql-createtrigger",
        "trigger-definition",
        "plpgsql-trigger",
    ),
    "Which file decides which hosts may connect and how they authenticate?": ("auth-pg-hba-conf",),
    "How do I upgrade a cluster to a new major version without dumping and reloading?": ("pgupgrade",),
    "Why can two transactions fail with a serialization error, and what should the application do?": (
        "mvcc-serialization-failure-handling",
        "transaction-iso",
    ),
    "How do I find out which queries are slowest on the server over time?": ("pgstatstatements",),
    "How do I keep a standby server in sync for failover?": ("warm-standby", "hot-standby", "high-availability"),
    "How do I copy only some tables' changes to another server continuously?": (
        "logical-replication",
        "logical-replication-publication",
        "logical-replication-quick-setup",
    ),
    "How much memory may a sort use before it spills to disk?": ("runtime-config-resource",),
    "How do I find similar strings with typos, for example fuzzy name matching?": ("pgtrgm", "fuzzystrmatch"),
    "How do I generate universally unique identifiers for primary keys?": (
        "datatype-uuid",
        "functions-uuid",
        "uuid-ossp",
    ),
    "What happens to a value that is too long for a column of limited length?": ("datatype-character",),
    "How can I give a read-only account access to all tables in a schema, including tables created later?": (
        "sql-grant",
        "sql-alterdefaultprivileges",
    ),
    "How do I number rows within groups or compute running totals?": ("tutorial-window", "functions-window"),
    "How do I write a recursive query to walk a tree of parent and child rows?": ("queries-with",),
    "How can I restore the database to the state it was in at a specific time yesterday?": ("continuous-archiving",),
    "How do I find out which sessions are holding locks that block others?": ("view-pg-locks", "monitoring-locks"),
    "How do I hash passwords or encrypt data inside SQL?": ("pgcrypto",),
    "How do I check how much disk space a table and its indexes use?": ("disk-usage", "functions-admin"),
    "How can I query a table on another PostgreSQL server as if it were local?": ("postgres-fdw", "dblink"),
    "How do I set a time zone so that timestamps are shown in local time?": (
        "datatype-datetime",
        "runtime-config-client",
    ),
    "How do I make the server log every statement that takes longer than a second?": (
        "runtime-config-logging",
        "auto-explain",
    ),
    "How do I create an index that only covers rows with a certain status?": ("indexes-partial",),
    "How do I index lower-cased email addresses so that case-insensitive lookups are fast?": (
        "indexes-expressional",
        "citext",
    ),
    "How do I insert a row, or update it if it already exists?": ("sql-insert", "sql-merge"),
    "How can I get back the id generated for a row I just inserted?": ("dml-returning",),
    "How do I add a column that is always computed from other columns?": ("ddl-generated-columns",),
    "How many connections can the server accept and where is that set?": ("runtime-config-connection",),
    "How do I loop over query results in a stored procedure?": ("plpgsql-control-structures",),
    "How do I write a database function in Python that runs inside the server?": ("plpython", "plpython-funcs"),
    "How do I make a single query use several CPU cores?": (
        "parallel-query",
        "how-parallel-query-works",
        "when-can-parallel-query-be-used",
    ),
    "How do I create an automatically incrementing number for new rows?": (
        "sql-createsequence",
        "datatype-numeric",
        "functions-sequence",
    ),
    "What do error codes like 23505 mean?": ("errcodes-appendix",),
    "How do I connect to the database from a C program?": ("libpq-connect", "libpq-example"),
    "How do I store a range of dates and prevent bookings from overlapping?": ("rangetypes",),
    "How do I make a table that skips the write-ahead log for speed, accepting data loss after a crash?": (
        "sql-createtable",
        "non-durability",
    ),
    "How do I check a B-tree index for corruption?": ("amcheck",),
    "How do I set up a password file so that scripts do not prompt for a password?": ("libpq-pgpass",),
}
