"""Turns PostgREST query strings into SQL (PostgREST stand-in for tests).

Grammar covered (what postgrest-py 2.x emits): `select=a,b,alias:c`, column filters
`col=[not.]op.value` with eq/neq/gt/gte/lt/lte/like/ilike/match/imatch/is/isdistinct/in/cs/cd/ov,
logic trees `or=(...)`, `and=(...)`, `not.or=(...)` nested to any depth, and
`order=col[.asc|.desc][.nullsfirst|.nullslast],...`. Column names are checked against the
schema cache before they reach SQL; values always travel as query parameters.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import sql

from tests.postgrest_standin.errors import PostgrestError, parse_error, unsupported

ROW_ALIAS = "t"
"""Every statement names the relation (or function result) it reads or writes `t`."""

RESERVED_PARAMS = frozenset({"select", "order", "limit", "offset", "on_conflict", "columns"})
LOGIC_KEYS = frozenset({"or", "and", "not.or", "not.and"})

_COMPARISONS = {
    "eq": "=",
    "neq": "<>",
    "gt": ">",
    "gte": ">=",
    "lt": "<",
    "lte": "<=",
    "like": "LIKE",
    "ilike": "ILIKE",
    "match": "~",
    "imatch": "~*",
    "isdistinct": "IS DISTINCT FROM",
    "cs": "@>",
    "cd": "<@",
    "ov": "&&",
}
_IS_VALUES = {
    "null": "IS NULL",
    "not_null": "IS NOT NULL",
    "true": "IS TRUE",
    "false": "IS FALSE",
    "unknown": "IS UNKNOWN",
}


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on `separator` outside parentheses and double quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    quoted = False
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0 and char == separator:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if quoted or depth != 0:
        raise parse_error(f"unbalanced quotes or parentheses in {text!r}")
    parts.append("".join(current))
    return parts


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        out: list[str] = []
        chars = iter(inner)
        for char in chars:
            out.append(next(chars, "") if char == "\\" else char)
        return "".join(out)
    return value


class QueryBuilder:
    """Builds the pieces of one statement over a known set of columns.

    Values become named placeholders (`%(p0)s`, `%(p1)s`, ...) collected in `params`, so the
    pieces can be composed in any order.
    """

    def __init__(self, columns: Iterable[str], relation_label: str) -> None:
        self.columns = tuple(columns)
        self.label = relation_label
        self.params: dict[str, Any] = {}
        self._names = (f"p{i}" for i in itertools.count())

    # ------------------------------------------------------------------ values and names
    def value(self, value: Any) -> sql.Placeholder:
        name = next(self._names)
        self.params[name] = value
        return sql.Placeholder(name)

    def column(self, name: str) -> sql.Identifier:
        name = unquote(name.strip())
        if "->" in name:
            raise unsupported(f"JSON path {name!r}")
        if name not in self.columns:
            raise PostgrestError(
                400,
                "42703",
                f"column {self.label}.{name} does not exist",
                hint=f"Known columns: {', '.join(self.columns)}",
            )
        return sql.Identifier(ROW_ALIAS, name)

    # ------------------------------------------------------------------ select / order
    def select_list(self, select: str | None) -> sql.Composable:
        if not select or select == "*":
            return sql.SQL("{}.*").format(sql.Identifier(ROW_ALIAS))
        items: list[sql.Composable] = []
        for raw in split_top_level(select):
            item = raw.strip()
            if item == "*":
                items.append(sql.SQL("{}.*").format(sql.Identifier(ROW_ALIAS)))
                continue
            if "(" in item or "::" in item:
                raise unsupported(f"select item {item!r} (embedding, aggregates and casts)")
            alias, _, name = item.rpartition(":")
            column = self.column(name)
            label = unquote(alias) if alias else unquote(name)
            items.append(sql.SQL("{} AS {}").format(column, sql.Identifier(label)))
        return sql.SQL(", ").join(items)

    def order_by(self, order: str | None) -> sql.Composable:
        if not order:
            return sql.SQL("")
        terms: list[sql.Composable] = []
        for raw in split_top_level(order):
            name, *modifiers = raw.strip().split(".")
            direction, nulls = sql.SQL(""), sql.SQL("")
            for modifier in modifiers:
                if modifier in ("asc", "desc"):
                    direction = sql.SQL(" DESC" if modifier == "desc" else " ASC")
                elif modifier in ("nullsfirst", "nullslast"):
                    nulls = sql.SQL(" NULLS FIRST" if modifier == "nullsfirst" else " NULLS LAST")
                else:
                    raise parse_error(f"unknown order modifier {modifier!r} in {raw!r}")
            terms.append(sql.Composed([self.column(name), direction, nulls]))
        return sql.SQL(" ORDER BY ") + sql.SQL(", ").join(terms)

    # ------------------------------------------------------------------ filters
    def where(self, query: Sequence[tuple[str, str]], skip: Iterable[str] = ()) -> sql.Composable:
        """AND of every filter in the query string (reserved keys and `skip` left out)."""
        skipped = set(skip) | RESERVED_PARAMS
        conditions: list[sql.Composable] = []
        for key, value in query:
            if key in skipped:
                continue
            if key in LOGIC_KEYS:
                negate, _, op = key.rpartition(".")
                conditions.append(self._logic(op, value, negate=bool(negate)))
            else:
                conditions.append(self._filter(key, value))
        if not conditions:
            return sql.SQL("")
        return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions)

    def _logic(self, op: str, body: str, *, negate: bool) -> sql.Composable:
        if not (body.startswith("(") and body.endswith(")")):
            raise parse_error(f"a logic tree must be wrapped in parentheses: {body!r}")
        parts: list[sql.Composable] = []
        for item in split_top_level(body[1:-1]):
            item = item.strip()
            head, _, rest = item.partition("(")
            if head in ("and", "or", "not.and", "not.or") and rest:
                inner_negate, _, inner_op = head.rpartition(".")
                parts.append(self._logic(inner_op, "(" + rest, negate=bool(inner_negate)))
                continue
            column, expression = _split_column(item)
            parts.append(self._filter(column, expression, in_logic_tree=True))
        if not parts:
            raise parse_error(f"empty logic tree {body!r}")
        joiner = sql.SQL(" OR ") if op == "or" else sql.SQL(" AND ")
        tree = sql.SQL("(") + joiner.join(parts) + sql.SQL(")")
        return sql.SQL("NOT ") + tree if negate else tree

    def _filter(self, key: str, expression: str, *, in_logic_tree: bool = False) -> sql.Composable:
        column = self.column(key)
        negate = expression.startswith("not.")
        if negate:
            expression = expression.removeprefix("not.")
        op, dot, raw = expression.partition(".")
        if not dot:
            raise parse_error(f"filter {key}={expression!r} needs the form operator.value")
        if in_logic_tree:
            raw = unquote(raw)
        condition = self._condition(column, op, raw)
        return sql.SQL("NOT ({})").format(condition) if negate else condition

    def _condition(self, column: sql.Identifier, op: str, raw: str) -> sql.Composable:
        if op == "is":
            if raw.lower() not in _IS_VALUES:
                raise parse_error(f"is.{raw} must be one of null, not_null, true, false, unknown")
            return sql.SQL("{} ").format(column) + sql.SQL(_IS_VALUES[raw.lower()])
        if op == "in":
            if not (raw.startswith("(") and raw.endswith(")")):
                raise parse_error(f"in.{raw} must be a parenthesised list, e.g. in.(1,2,3)")
            items = [unquote(v.strip()) for v in split_top_level(raw[1:-1])] if raw != "()" else []
            if not items:
                return sql.SQL("false")
            placeholders = sql.SQL(", ").join(self.value(v) for v in items)
            return sql.SQL("{} IN ({})").format(column, placeholders)
        if op in _COMPARISONS:
            if op in ("like", "ilike"):
                raw = raw.replace("*", "%")
            return sql.SQL("{} {} {}").format(column, sql.SQL(_COMPARISONS[op]), self.value(raw))
        if op in ("fts", "plfts", "phfts", "wfts", "sl", "sr", "nxl", "nxr", "adj") or "(" in op:
            raise unsupported(f"filter operator {op!r}")
        raise parse_error(f"unknown filter operator {op!r}")


def _split_column(item: str) -> tuple[str, str]:
    """`col.op.value` or `"quoted.col".op.value` -> (column, `op.value`)."""
    if item.startswith('"'):
        end = item.find('"', 1)
        if end == -1 or item[end + 1 : end + 2] != ".":
            raise parse_error(f"cannot read the column of {item!r}")
        return item[: end + 1], item[end + 2 :]
    column, dot, expression = item.partition(".")
    if not dot:
        raise parse_error(f"filter {item!r} needs the form column.operator.value")
    return column, expression
