"""resolve_id for the stores that keep schema_v2's tables: which table holds a kind's ids, what
an id prefix may be and the forms a stored id that starts with it can take, and the one id a
prefix matched (AmbiguousIdError, naming a few, when it matched several).
"""

from __future__ import annotations

import itertools
import re
import uuid

from accelopt_mcp.store._checks import MIN_ID_PREFIX, canonical_uuid, require_str
from accelopt_mcp.store.base import AmbiguousIdError

ID_TABLES = {
    "solution": "solutions",
    "run": "runs",
    "experience": "experiences",
    "suite": "suites",
}
"""resolve_id's kinds and the tables that hold them."""
_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]*")


def id_lookup(kind: object, id_or_prefix: str) -> tuple[str, str | None]:
    """resolve_id's arguments checked: the table that holds the kind's ids, and the id in its
    stored form when `id_or_prefix` may be a whole one (None when it cannot be)."""
    if not isinstance(kind, str) or kind not in ID_TABLES:
        raise ValueError(f"kind must be one of {', '.join(ID_TABLES)}, got {kind!r}")
    require_str(id_or_prefix, "id_or_prefix")
    exact = canonical_uuid(id_or_prefix) if kind == "solution" else id_or_prefix
    return ID_TABLES[kind], exact


def prefix_hex(value: str) -> str | None:
    """The hexadecimal digits of an id prefix (dashes dropped, lower-cased), when `value` can
    be one (hex digits and dashes, MIN_ID_PREFIX to 32 digits); None otherwise."""
    lowered = value.strip().lower()
    if not _ID_PREFIX.fullmatch(lowered):
        return None
    digits = lowered.replace("-", "")
    return digits if MIN_ID_PREFIX <= len(digits) <= 32 else None


def prefix_forms(digits: str) -> tuple[str, ...]:
    """How stored ids that start with these hex digits begin: as a canonical uuid's text
    (dashes after 8, 12, 16 and 20 digits) and as plain hex (runs and memory items)."""
    cuts = (0, 8, 12, 16, 20, 32)
    dashed = "-".join(digits[a:b] for a, b in itertools.pairwise(cuts) if digits[a:b])
    return tuple(dict.fromkeys((dashed, digits)))


def uuid_bounds(digits: str) -> tuple[str, str]:
    """The lowest and highest uuid whose hex starts with these digits."""
    low = uuid.UUID(hex=digits.ljust(32, "0"))
    high = uuid.UUID(hex=digits.ljust(32, "f"))
    return str(low), str(high)


AMBIGUOUS_SHOWN = 3
"""How many of the ids an ambiguous prefix matches its error shows."""


def one_id(kind: str, given: str, found: list[str]) -> str | None:
    """The one id a prefix matched (None for none); AmbiguousIdError for several. `found`
    holds at most AMBIGUOUS_SHOWN + 1 of them, sorted."""
    if len(found) <= 1:
        return found[0] if found else None
    more = len(found) > AMBIGUOUS_SHOWN
    count = f"more than {AMBIGUOUS_SHOWN}" if more else str(len(found))
    shown = ", ".join(found[:AMBIGUOUS_SHOWN]) + (", ..." if more else "")
    raise AmbiguousIdError(
        f"{kind} id prefix {given!r} matches {count} {kind}s ({shown}); give more of the id",
        kind=kind,
        given=given,
        matches=tuple(found[:AMBIGUOUS_SHOWN]),
        more=more,
    )
