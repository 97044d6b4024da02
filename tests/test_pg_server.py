import psycopg

from tests.pg_server import create_database


def test_session_postgres_is_real_and_isolated(pg_admin_dsn: str) -> None:
    dsn = create_database(pg_admin_dsn, "smoke_check")
    with psycopg.connect(dsn) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()[0]
        assert int(version) >= 150000
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
        assert conn.execute("SELECT sum(x) FROM t").fetchone()[0] == 3
