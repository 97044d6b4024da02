from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from supabase import Client, ClientOptions, create_client

from tests.pg_server import create_database
from tests.postgrest_standin.launcher import RunningStandIn, start_standin

# A schema of its own, so the stand-in is tested apart from the kernel database: it covers the
# column kinds PostgREST treats differently (uuid, arrays, jsonb, generated, views, functions).
SCHEMA = """
CREATE TABLE owners (name text PRIMARY KEY);
CREATE TABLE items (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    sku         text NOT NULL UNIQUE,
    owner       text REFERENCES owners (name),
    qty         int NOT NULL DEFAULT 0,
    price       double precision,
    tags        text[] NOT NULL DEFAULT '{}',
    meta        jsonb NOT NULL DEFAULT '{}',
    note        text,
    upper_sku   text GENERATED ALWAYS AS (upper(sku)) STORED,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE VIEW pricey_items AS SELECT sku, price FROM items WHERE price > 10;
CREATE FUNCTION items_of(who text) RETURNS SETOF items LANGUAGE sql STABLE AS
    $$ SELECT * FROM items WHERE owner = who ORDER BY sku $$;
CREATE FUNCTION total_qty(who text) RETURNS bigint LANGUAGE sql STABLE AS
    $$ SELECT coalesce(sum(qty), 0) FROM items WHERE owner = who $$;
"""


@pytest.fixture(scope="session")
def standin_dsn(pg_admin_dsn: str) -> str:
    dsn = create_database(pg_admin_dsn, "postgrest_standin_tests")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return dsn


@pytest.fixture(scope="session")
def standin(standin_dsn: str) -> Iterator[RunningStandIn]:
    running = start_standin(standin_dsn, "standin-" + secrets.token_hex(16))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def db(standin_dsn: str) -> Iterator[psycopg.Connection]:
    """Direct connection to the stand-in's database, emptied before each test."""
    with psycopg.connect(standin_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE items, owners")
        conn.execute("INSERT INTO owners VALUES ('ann'), ('bob')")
        yield conn


@pytest.fixture
def client(standin: RunningStandIn, db: psycopg.Connection) -> Iterator[Client]:
    with httpx.Client(timeout=10) as http:
        yield create_client(standin.url, standin.key, options=ClientOptions(httpx_client=http))
