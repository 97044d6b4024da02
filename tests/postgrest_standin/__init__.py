"""PostgREST stand-in for tests -- NOT a product feature.

Supabase serves its tables through PostgREST at `/rest/v1`. PostgREST is a Haskell server that
cannot be installed on the test machines, so the tests start this small ASGI app in its place,
in front of the same real PostgreSQL server the rest of the suite uses. It implements the subset
of PostgREST's HTTP interface that supabase-py (postgrest-py 2.x) sends: table reads with
filters, `or=(...)`, order, limit/offset and counts; inserts, upserts with `on_conflict`,
updates, deletes; `rpc/<function>` calls; and PostgREST's error bodies and HTTP statuses.

Start it with `python -m tests.postgrest_standin --dsn postgresql://... --port 8765`; the API key
it accepts comes from the environment variable POSTGREST_STANDIN_KEY.
"""

from tests.postgrest_standin.app import create_app

__all__ = ["create_app"]
