"""The stand-in's HTTP interface: `/rest/v1/{relation}` and `/rest/v1/rpc/{function}`
(PostgREST stand-in for tests).

Each request runs in one transaction on a real PostgreSQL connection. Results are turned into
JSON by PostgreSQL itself (json_agg), as PostgREST does, so timestamps, JSONB and numbers look
exactly as they would from Supabase. Like a Supabase project (which ships pg_safeupdate), an
UPDATE or DELETE without a filter is refused. Given a `role`, every request runs as that role
(`SET LOCAL ROLE`, as PostgREST does for the role its key's JWT names), so that row level
security and grants apply as they would to Supabase's anon or authenticated key; by default
requests run as the DSN's user.
"""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.postgrest_standin.catalog import SCHEMA, Catalog, Function, Relation
from tests.postgrest_standin.errors import PostgrestError, from_database_error, parse_error
from tests.postgrest_standin.query import QueryBuilder, split_top_level, unquote

JSON_TYPE = "application/json; charset=utf-8"
_UNKNOWN_COLUMN_CODES = frozenset({"42703", "PGRST204"})
"""A request naming a column the schema cache lacks (a filter, a select, an upsert body)."""
SINGLE_OBJECT = "application/vnd.pgrst.object+json"
DATABASE_PATH = "/_standin/database"
"""Not PostgREST's: POST {"dsn": ...} points the running stand-in at another database."""


@dataclass
class Prefer:
    returning: str = "minimal"
    resolution: str | None = None
    count: str | None = None
    missing_default: bool = False

    @classmethod
    def parse(cls, request: Request) -> Prefer:
        prefer = cls()
        for header in request.headers.getlist("prefer"):
            for token in header.split(","):
                key, _, value = token.strip().partition("=")
                if key == "return":
                    prefer.returning = value
                elif key == "resolution":
                    prefer.resolution = value
                elif key == "count":
                    prefer.count = value
                elif key == "missing":
                    prefer.missing_default = value == "default"
        return prefer


@dataclass
class Result:
    body: str
    rows: int


def _qualified(name: str) -> sql.Identifier:
    return sql.Identifier(SCHEMA, name)


def _aggregate(inner: sql.Composable) -> sql.Composable:
    """Rows of `inner` as one JSON array, plus their number."""
    return sql.SQL("SELECT coalesce(json_agg(_r), '[]')::text, count(*) FROM ({}) AS _r").format(
        inner
    )


def _limit_offset(
    builder: QueryBuilder, request: Request
) -> tuple[sql.Composable, int, int | None]:
    limit_raw = request.query_params.get("limit")
    offset_raw = request.query_params.get("offset")
    range_header = request.headers.get("range")
    try:
        offset = int(offset_raw) if offset_raw else 0
        limit = int(limit_raw) if limit_raw else None
        if range_header and "-" in range_header:
            first, _, last = range_header.partition("-")
            offset = int(first)
            limit = int(last) - offset + 1 if last else limit
    except ValueError as exc:
        raise parse_error(f"limit, offset and Range must be integers: {exc}") from exc
    if offset < 0 or (limit is not None and limit < 0):
        raise parse_error("limit and offset must not be negative")
    clause = sql.SQL("")
    if limit is not None:
        clause += sql.SQL(" LIMIT {}").format(builder.value(limit))
    if offset:
        clause += sql.SQL(" OFFSET {}").format(builder.value(offset))
    return clause, offset, limit


class StandIn:
    def __init__(self, dsn: str, api_key: str, role: str | None = None) -> None:
        self.api_key = api_key
        self.role = role
        self.pool = ConnectionPool(dsn, min_size=1, max_size=8, open=True)
        # Through a lambda, not the bound method: repoint() replaces the pool.
        self.catalog = Catalog(lambda: self.pool.connection())

    def repoint(self, dsn: str) -> None:
        """Serve the database at `dsn` from now on (a test session's one stand-in moves to each
        test's fresh database): a new pool and a freshly loaded schema cache; the old pool is
        closed once its connections are back."""
        old, self.pool = self.pool, ConnectionPool(dsn, min_size=1, max_size=8, open=True)
        old.close()
        self.catalog.reload()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection in a transaction of its own, as the request's role."""
        with self.pool.connection() as conn:
            if self.role is not None:
                conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(self.role)))
            yield conn

    # ------------------------------------------------------------------ plumbing
    def check_key(self, request: Request) -> None:
        given = request.headers.get("apikey") or request.query_params.get("apikey")
        if not given:
            raise PostgrestError(
                401,
                None,
                "No API key found in request",
                hint="No `apikey` request header or url param was found.",
            )
        bearer = request.headers.get("authorization", "")
        token = bearer.removeprefix("Bearer ").strip() if bearer else given
        if not (_same(given, self.api_key) and _same(token, self.api_key)):
            raise PostgrestError(
                401,
                "PGRST301",
                "Invalid API key",
                hint="Double check your Supabase `anon` or `service_role` API key.",
            )
        profile = request.headers.get("accept-profile") or request.headers.get("content-profile")
        if profile and profile != SCHEMA:
            raise PostgrestError(
                406, "PGRST106", f"The schema must be one of the following: {SCHEMA}"
            )

    def run(self, statement: sql.Composable, params: dict[str, Any]) -> Result:
        with self._connection() as conn:
            row = conn.execute(statement, params).fetchone()
        assert row is not None
        return Result(row[0], row[1])

    def count(self, relation: Relation, where: sql.Composable, params: dict[str, Any]) -> int:
        statement = sql.SQL("SELECT count(*) FROM {} AS t{}").format(
            _qualified(relation.name), where
        )
        with self._connection() as conn:
            row = conn.execute(statement, params).fetchone()
        assert row is not None
        return int(row[0])

    # ------------------------------------------------------------------ read
    def read(self, name: str, request: Request) -> Response:
        relation = self.catalog.relation(name)
        builder = QueryBuilder(relation.columns, relation.name)
        query = list(request.query_params.multi_items())
        where = builder.where(query)
        select = builder.select_list(request.query_params.get("select"))
        order = builder.order_by(request.query_params.get("order"))
        limits, offset, _ = _limit_offset(builder, request)
        inner = sql.SQL("SELECT {} FROM {} AS t{}{}{}").format(
            select, _qualified(relation.name), where, order, limits
        )
        result = self.run(_aggregate(inner), builder.params)
        prefer = Prefer.parse(request)
        total = self.count(relation, where, builder.params) if prefer.count else None
        return _rows_response(request, result, status=200, offset=offset, total=total)

    # ------------------------------------------------------------------ write
    def insert(self, name: str, request: Request, body: Any) -> Response:
        relation = self.catalog.relation(name)
        prefer = Prefer.parse(request)
        rows = body if isinstance(body, list) else [body]
        if not all(isinstance(r, dict) for r in rows):
            raise PostgrestError(400, "PGRST102", "All object keys must match")
        columns = _payload_columns(relation, request, rows)
        builder = QueryBuilder(relation.columns, relation.name)
        target = _qualified(relation.name)
        column_list = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        if columns and prefer.missing_default:
            source = sql.SQL("({}) VALUES {}").format(
                column_list, _values_with_defaults(builder, target, columns, rows)
            )
        elif columns:
            # A key missing from one row of a bulk insert becomes NULL, as in PostgREST.
            source = sql.SQL(
                "({}) SELECT {} FROM json_populate_recordset(NULL::{}, {}::json)"
            ).format(column_list, column_list, target, builder.value(json.dumps(rows)))
        else:
            source = sql.SQL("DEFAULT VALUES")
        conflict = self._on_conflict(relation, request, prefer, columns)
        statement = sql.SQL("INSERT INTO {} AS t {}{} RETURNING t.*").format(
            target, source, conflict
        )
        return self._mutation(relation, request, prefer, statement, builder, status=201)

    def _on_conflict(
        self, relation: Relation, request: Request, prefer: Prefer, columns: list[str]
    ) -> sql.Composable:
        if prefer.resolution not in ("merge-duplicates", "ignore-duplicates"):
            return sql.SQL("")
        raw = request.query_params.get("on_conflict")
        keys = [unquote(k.strip()) for k in split_top_level(raw)] if raw else []
        keys = keys or list(relation.primary_key)
        for key in keys:
            if key not in relation.columns:
                raise PostgrestError(
                    400, "42703", f"column {relation.name}.{key} does not exist (on_conflict)"
                )
        target = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
        updates = [c for c in columns if c not in keys]
        if prefer.resolution == "ignore-duplicates" or not updates:
            return sql.SQL(" ON CONFLICT ({}) DO NOTHING").format(target)
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in updates
        )
        return sql.SQL(" ON CONFLICT ({}) DO UPDATE SET {}").format(target, assignments)

    def update(self, name: str, request: Request, body: Any) -> Response:
        relation = self.catalog.relation(name)
        prefer = Prefer.parse(request)
        if not isinstance(body, dict):
            raise PostgrestError(400, "PGRST102", "An UPDATE takes one JSON object")
        columns = _payload_columns(relation, request, [body])
        builder = QueryBuilder(relation.columns, relation.name)
        where = builder.where(list(request.query_params.multi_items()))
        _require_filter(where, "UPDATE")
        if not columns:
            return _rows_response(request, Result("[]", 0), status=200, offset=0, total=None)
        target = _qualified(relation.name)
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = _p.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in columns
        )
        statement = sql.SQL(
            "UPDATE {} AS t SET {} FROM json_populate_record(NULL::{}, {}::json) AS _p{} "
            "RETURNING t.*"
        ).format(target, assignments, target, builder.value(json.dumps(body)), where)
        return self._mutation(relation, request, prefer, statement, builder, status=200)

    def delete(self, name: str, request: Request) -> Response:
        relation = self.catalog.relation(name)
        prefer = Prefer.parse(request)
        builder = QueryBuilder(relation.columns, relation.name)
        where = builder.where(list(request.query_params.multi_items()))
        _require_filter(where, "DELETE")
        statement = sql.SQL("DELETE FROM {} AS t{} RETURNING t.*").format(
            _qualified(relation.name), where
        )
        return self._mutation(relation, request, prefer, statement, builder, status=200)

    def _mutation(
        self,
        relation: Relation,
        request: Request,
        prefer: Prefer,
        statement: sql.Composable,
        builder: QueryBuilder,
        *,
        status: int,
    ) -> Response:
        select = builder.select_list(request.query_params.get("select"))
        wrapped = sql.SQL("WITH _m AS ({}) ").format(statement) + _aggregate(
            sql.SQL("SELECT {} FROM _m AS t").format(select)
        )
        result = self.run(wrapped, builder.params)
        headers = {"Content-Range": f"*/{result.rows}"}
        if prefer.returning != "representation":
            # PostgREST answers 201 for an insert and 204 for an update or delete here.
            return Response(status_code=201 if status == 201 else 204, headers=headers)
        return _rows_response(request, result, status=status, offset=0, total=None)

    # ------------------------------------------------------------------ rpc
    def call(self, name: str, request: Request, body: Any) -> Response:
        if request.method in ("GET", "HEAD"):
            arguments: dict[str, Any] = dict(request.query_params)
        elif isinstance(body, dict):
            arguments = body
        else:
            raise PostgrestError(400, "PGRST102", "RPC arguments must be one JSON object")
        candidates = set(arguments)
        function = self.catalog.function(name, _argument_names(request, candidates))
        argument_names = {a.name for a in function.arguments}
        builder = QueryBuilder(function.result_columns, name)
        named = []
        for argument in function.arguments:
            if argument.name in arguments:
                placeholder = builder.value(_argument_value(arguments[argument.name]))
                named.append(
                    sql.SQL("{} := {}::{}").format(
                        sql.Identifier(argument.name), placeholder, sql.SQL(argument.type_sql)
                    )
                )
        call = sql.SQL("{}({})").format(_qualified(function.name), sql.SQL(", ").join(named))
        if function.returns_void:
            self.run(sql.SQL("SELECT ''::text, 0 FROM {}").format(call), builder.params)
            return Response(status_code=204)
        if not function.returns_rows:
            return self._scalar_call(request, function, call, builder)
        where = builder.where(list(request.query_params.multi_items()), skip=argument_names)
        select = builder.select_list(request.query_params.get("select"))
        order = builder.order_by(request.query_params.get("order"))
        limits, offset, _ = _limit_offset(builder, request)
        inner = sql.SQL("SELECT {} FROM {} AS t{}{}{}").format(select, call, where, order, limits)
        result = self.run(_aggregate(inner), builder.params)
        if not function.returns_set:
            rows = json.loads(result.body)
            return Response(json.dumps(rows[0] if rows else None), media_type=JSON_TYPE)
        return _rows_response(request, result, status=200, offset=offset, total=None)

    def _scalar_call(
        self, request: Request, function: Function, call: sql.Composable, builder: QueryBuilder
    ) -> Response:
        if function.returns_set:
            statement = sql.SQL(
                "SELECT coalesce(json_agg(t), '[]')::text, count(*) FROM {} AS t"
            ).format(call)
        else:
            statement = sql.SQL("SELECT to_json({})::text, 1").format(call)
        result = self.run(statement, builder.params)
        return Response(result.body, media_type=JSON_TYPE)

    def describe(self) -> Response:
        """GET /rest/v1/: a short OpenAPI-like description, as PostgREST serves there."""
        paths = {f"/{name}": {} for name in self.catalog.relation_names()}
        document = {
            "swagger": "2.0",
            "info": {"title": "PostgREST stand-in for tests", "version": "0"},
            "paths": {"/": {}, **paths},
        }
        return JSONResponse(document, media_type="application/openapi+json; charset=utf-8")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _argument_names(request: Request, given: set[str]) -> set[str]:
    """For GET calls, query keys that are filters or modifiers are not arguments."""
    if request.method not in ("GET", "HEAD"):
        return given
    return {k for k in given if k not in ("select", "order", "limit", "offset")}


def _argument_value(value: Any) -> Any:
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _payload_columns(relation: Relation, request: Request, rows: list[dict[str, Any]]) -> list[str]:
    raw = request.query_params.get("columns")
    if raw:
        columns = [unquote(c.strip()) for c in split_top_level(raw)]
    else:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    for column in columns:
        if column not in relation.columns:
            raise PostgrestError(
                400,
                "PGRST204",
                f"Could not find the '{column}' column of '{relation.name}' in the schema cache",
            )
    return columns


def _values_with_defaults(
    builder: QueryBuilder, target: sql.Identifier, columns: list[str], rows: list[dict[str, Any]]
) -> sql.Composable:
    """VALUES rows for `Prefer: missing=default`: a key a row lacks takes the column default."""
    tuples: list[sql.Composable] = []
    for row in rows:
        record = sql.SQL("(json_populate_record(NULL::{}, {}::json))").format(
            target, builder.value(json.dumps(row))
        )
        items = [
            sql.SQL("{}.{}").format(record, sql.Identifier(c)) if c in row else sql.SQL("DEFAULT")
            for c in columns
        ]
        tuples.append(sql.SQL("({})").format(sql.SQL(", ").join(items)))
    return sql.SQL(", ").join(tuples)


def _require_filter(where: sql.Composable, verb: str) -> None:
    if where == sql.SQL(""):
        raise PostgrestError(
            400,
            "21000",
            f"{verb} requires a WHERE clause",
            hint="Add a filter (e.g. ?id=eq.<id>); Supabase refuses unfiltered writes.",
        )


def _rows_response(
    request: Request, result: Result, *, status: int, offset: int, total: int | None
) -> Response:
    shown = "*" if total is None else str(total)
    first_last = f"{offset}-{offset + result.rows - 1}" if result.rows else "*"
    content_range = f"{first_last}/{shown}"
    headers = {"Content-Range": content_range}
    if SINGLE_OBJECT in request.headers.get("accept", ""):
        if result.rows != 1:
            raise PostgrestError(
                406,
                "PGRST116",
                "Cannot coerce the result to a single JSON object",
                details=f"The result contains {result.rows} rows",
            )
        single = json.dumps(json.loads(result.body)[0])
        return Response(single, status_code=status, headers=headers, media_type=JSON_TYPE)
    if total is not None and status == 200 and result.rows < total:
        status = 206
    body = "" if request.method == "HEAD" else result.body
    return Response(body, status_code=status, headers=headers, media_type=JSON_TYPE)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise PostgrestError(400, "PGRST102", "Empty or invalid json", details=str(exc)) from exc


def create_app(dsn: str, api_key: str, role: str | None = None) -> Starlette:
    """The ASGI app: PostgREST's `/rest/v1` over the database at `dsn`, accepting `api_key`;
    requests run as `role` if given."""
    if not api_key:
        raise ValueError("the PostgREST stand-in needs a non-empty API key")
    standin = StandIn(dsn, api_key, role)

    def guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                standin.check_key(request)
                try:
                    return await handler(request)
                except PostgrestError as exc:
                    if exc.code not in _UNKNOWN_COLUMN_CODES:
                        raise
                    # A column the cache does not know may have been added since it was
                    # loaded (schema_v2.txt applied again): reload once and try again.
                    await run_in_threadpool(standin.catalog.reload)
                    return await handler(request)
            except PostgrestError as exc:
                return JSONResponse(exc.body(), status_code=exc.status)
            except psycopg.OperationalError as exc:
                if exc.sqlstate is None:
                    failure = PostgrestError(
                        503, "PGRST000", "Database connection error", details=str(exc)
                    )
                else:
                    failure = from_database_error(exc)
                return JSONResponse(failure.body(), status_code=failure.status)
            except psycopg.Error as exc:
                failure = from_database_error(exc)
                return JSONResponse(failure.body(), status_code=failure.status)

        return endpoint

    async def relation_endpoint(request: Request) -> Response:
        name = request.path_params["relation"]
        if request.method in ("GET", "HEAD"):
            return await run_in_threadpool(standin.read, name, request)
        if request.method == "DELETE":
            return await run_in_threadpool(standin.delete, name, request)
        body = await _json_body(request)
        if request.method == "POST":
            return await run_in_threadpool(standin.insert, name, request, body)
        return await run_in_threadpool(standin.update, name, request, body)

    async def rpc_endpoint(request: Request) -> Response:
        body = {} if request.method in ("GET", "HEAD") else await _json_body(request)
        return await run_in_threadpool(standin.call, request.path_params["function"], request, body)

    async def root_endpoint(request: Request) -> Response:
        return await run_in_threadpool(standin.describe)

    async def database_endpoint(request: Request) -> Response:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("dsn"), str):
            raise PostgrestError(400, "PGRST102", 'expected {"dsn": "<dsn>"}')
        await run_in_threadpool(standin.repoint, body["dsn"])
        return Response(status_code=204)

    app = Starlette(
        routes=[
            Route("/rest/v1/", guarded(root_endpoint), methods=["GET", "HEAD"]),
            Route(DATABASE_PATH, guarded(database_endpoint), methods=["POST"]),
            Route(
                "/rest/v1/rpc/{function}",
                guarded(rpc_endpoint),
                methods=["GET", "HEAD", "POST"],
            ),
            Route(
                "/rest/v1/{relation}",
                guarded(relation_endpoint),
                methods=["GET", "HEAD", "POST", "PATCH", "DELETE"],
            ),
        ],
        lifespan=_closing(standin),
    )
    return app


def _closing(standin: StandIn) -> Callable[[Starlette], Any]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            standin.pool.close()

    return lifespan
