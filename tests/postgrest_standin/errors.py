"""PostgREST's error body ({code, message, details, hint}) and its HTTP status rules
(PostgREST stand-in for tests)."""

from __future__ import annotations

from typing import Any

import psycopg


class PostgrestError(Exception):
    """An error answered the way PostgREST answers it."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        *,
        details: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.hint = hint

    def body(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "details": self.details,
            "hint": self.hint,
            "message": self.message,
        }


# SQLSTATE -> HTTP status, most specific first, as PostgREST's documentation lists them.
_EXACT_STATUS = {
    "23503": 409,  # foreign_key_violation
    "23505": 409,  # unique_violation
    "25006": 405,  # read_only_sql_transaction
    "42P01": 404,  # undefined_table
    "42883": 404,  # undefined_function
    "42501": 403,  # insufficient_privilege
    "P0001": 400,  # raise_exception
}
_CLASS_STATUS = {
    "08": 503,
    "09": 500,
    "0L": 403,
    "0P": 403,
    "22": 400,
    "23": 400,
    "25": 500,
    "28": 403,
    "2D": 500,
    "38": 500,
    "39": 500,
    "3B": 500,
    "40": 500,
    "42": 400,
    "53": 503,
    "54": 500,
    "55": 500,
    "57": 500,
    "58": 500,
    "F0": 500,
    "HV": 500,
    "P0": 500,
    "XX": 500,
}


def status_for_sqlstate(sqlstate: str | None) -> int:
    if not sqlstate:
        return 500
    return _EXACT_STATUS.get(sqlstate) or _CLASS_STATUS.get(sqlstate[:2], 400)


def from_database_error(exc: psycopg.Error) -> PostgrestError:
    diag = exc.diag
    message = diag.message_primary or str(exc).strip()
    return PostgrestError(
        status_for_sqlstate(exc.sqlstate),
        exc.sqlstate,
        message,
        details=diag.message_detail,
        hint=diag.message_hint,
    )


def parse_error(message: str, details: str | None = None) -> PostgrestError:
    """PGRST100: the query string could not be parsed."""
    return PostgrestError(400, "PGRST100", message, details=details)


def unsupported(feature: str) -> PostgrestError:
    """A PostgREST feature this stand-in leaves out: say so instead of answering wrongly."""
    return PostgrestError(
        400,
        "PGRST100",
        f"{feature} is not supported by the PostgREST stand-in for tests",
        hint="Extend tests/postgrest_standin if a test needs it.",
    )
