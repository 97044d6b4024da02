"""The stand-in's schema cache: which relations, columns and functions exist in the exposed
schema (PostgREST stand-in for tests).

Only names found here are ever put into SQL text; everything else a client sends travels as a
query parameter. Like PostgREST, the cache is loaded from the system catalogs; unlike PostgREST
(which waits for `NOTIFY pgrst, 'reload schema'`), it reloads itself when a request names
something it does not know, so a schema applied after start-up is seen at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import psycopg

from tests.postgrest_standin.errors import PostgrestError

SCHEMA = "public"


@dataclass(frozen=True)
class Relation:
    name: str
    columns: tuple[str, ...]
    generated: frozenset[str]
    primary_key: tuple[str, ...]
    is_table: bool


@dataclass(frozen=True)
class Argument:
    name: str
    type_sql: str
    """The argument's type as PostgreSQL spells it (from format_type), used in a cast."""
    has_default: bool


@dataclass(frozen=True)
class Function:
    name: str
    arguments: tuple[Argument, ...]
    returns_set: bool
    returns_rows: bool
    """True for a composite or TABLE result (rows with columns), False for a scalar."""
    returns_void: bool
    result_columns: tuple[str, ...]


@dataclass
class _Snapshot:
    relations: dict[str, Relation] = field(default_factory=dict)
    functions: dict[str, list[Function]] = field(default_factory=dict)


_RELATIONS_SQL = """
SELECT c.relname, c.relkind IN ('r', 'p'), a.attname, a.attgenerated <> ''
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.relname, a.attnum
"""

_PRIMARY_KEYS_SQL = """
SELECT c.relname, a.attname
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN LATERAL unnest(k.conkey) WITH ORDINALITY AS u(attnum, pos) ON true
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = u.attnum
WHERE n.nspname = %s AND k.contype = 'p'
ORDER BY c.relname, u.pos
"""

_FUNCTIONS_SQL = """
SELECT p.proname, p.oid, p.proretset, t.typtype, t.typname = 'void', t.typrelid,
       p.pronargs, p.pronargdefaults,
       coalesce(p.proallargtypes, p.proargtypes::oid[]) AS argtypes,
       p.proargmodes, p.proargnames
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_type t ON t.oid = p.prorettype
WHERE n.nspname = %s AND p.prokind = 'f'
"""


class Catalog:
    """Thread-safe cache of the exposed schema, reloaded on demand."""

    def __init__(self, connect: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None

    def reload(self) -> None:
        with self._connect() as conn:
            snapshot = _load(conn)
        with self._lock:
            self._snapshot = snapshot

    def _current(self) -> _Snapshot:
        if self._snapshot is None:
            self.reload()
        assert self._snapshot is not None
        return self._snapshot

    def relation(self, name: str) -> Relation:
        found = self._current().relations.get(name)
        if found is None:
            self.reload()
            found = self._current().relations.get(name)
        if found is None:
            raise PostgrestError(
                404,
                "PGRST205",
                f"Could not find the table '{SCHEMA}.{name}' in the schema cache",
                hint=_suggest(name, self._current().relations),
            )
        return found

    def function(self, name: str, argument_names: set[str]) -> Function:
        candidates = self._current().functions.get(name)
        if not candidates:
            self.reload()
            candidates = self._current().functions.get(name, [])
        for candidate in candidates:
            names = {a.name for a in candidate.arguments}
            required = {a.name for a in candidate.arguments if not a.has_default}
            if argument_names <= names and required <= argument_names:
                return candidate
        listed = ", ".join(sorted(argument_names))
        raise PostgrestError(
            404,
            "PGRST202",
            f"Could not find the function {SCHEMA}.{name}({listed}) in the schema cache",
            hint="Perhaps the function is missing or its argument names differ.",
        )

    def relation_names(self) -> list[str]:
        return sorted(self._current().relations)


def _suggest(name: str, relations: dict[str, Relation]) -> str | None:
    close = [r for r in relations if r.startswith(name[:3])] if name else []
    return f"Perhaps you meant the table '{SCHEMA}.{close[0]}'" if close else None


def _load(conn: psycopg.Connection) -> _Snapshot:
    snapshot = _Snapshot()
    columns: dict[str, list[str]] = {}
    generated: dict[str, set[str]] = {}
    is_table: dict[str, bool] = {}
    for relname, table, attname, is_generated in conn.execute(_RELATIONS_SQL, (SCHEMA,)):
        columns.setdefault(relname, []).append(attname)
        is_table[relname] = table
        if is_generated:
            generated.setdefault(relname, set()).add(attname)
    keys: dict[str, list[str]] = {}
    for relname, attname in conn.execute(_PRIMARY_KEYS_SQL, (SCHEMA,)):
        keys.setdefault(relname, []).append(attname)
    for relname, cols in columns.items():
        snapshot.relations[relname] = Relation(
            relname,
            tuple(cols),
            frozenset(generated.get(relname, set())),
            tuple(keys.get(relname, [])),
            is_table[relname],
        )
    for row in conn.execute(_FUNCTIONS_SQL, (SCHEMA,)).fetchall():
        function = _function_from_row(conn, row)
        snapshot.functions.setdefault(function.name, []).append(function)
    return snapshot


def _function_from_row(conn: psycopg.Connection, row: tuple) -> Function:
    name, _oid, retset, typtype, is_void, typrelid, nargs, ndefaults, argtypes, modes, names = row
    modes = modes or ["i"] * len(argtypes)
    names = names or [""] * len(argtypes)
    arguments: list[Argument] = []
    out_columns: list[str] = []
    inputs_seen = 0
    for type_oid, mode, argname in zip(argtypes, modes, names, strict=True):
        if mode in ("i", "b", "v"):
            type_sql = conn.execute("SELECT format_type(%s, NULL)", (type_oid,)).fetchone()[0]
            # Defaults belong to the last `pronargdefaults` input arguments.
            has_default = inputs_seen >= nargs - ndefaults
            arguments.append(Argument(argname, type_sql, has_default))
            inputs_seen += 1
        if mode in ("o", "b", "t"):
            out_columns.append(argname)
    if typrelid:
        result_columns = tuple(
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum",
                (typrelid,),
            )
        )
    else:
        result_columns = tuple(out_columns)
    return Function(
        name=name,
        arguments=tuple(arguments),
        returns_set=retset,
        returns_rows=typtype == "c" or (bool(out_columns) and typtype == "p"),
        returns_void=is_void,
        result_columns=result_columns,
    )
