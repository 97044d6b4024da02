"""The PostgREST stand-in for tests, driven by the real supabase client over real HTTP."""

from __future__ import annotations

import uuid

import httpx
import psycopg
import pytest
from postgrest.exceptions import APIError
from supabase import Client

from tests.postgrest_standin.launcher import RunningStandIn


def _seed(client: Client) -> list[dict]:
    rows = [
        {"sku": "a-1", "owner": "ann", "qty": 3, "price": 5.5, "tags": ["red", "big"]},
        {"sku": "a-2", "owner": "ann", "qty": 7, "price": 12.0, "tags": ["blue"], "note": "x"},
        {"sku": "b-1", "owner": "bob", "qty": 1, "price": None, "meta": {"k": [1, 2]}},
        {"sku": "b-2", "owner": "bob", "qty": 9, "price": 30.25, "note": "Fragile, (glass)"},
    ]
    # Rows lack some keys: with default_to_null=False those take the column default.
    return client.table("items").insert(rows, default_to_null=False).execute().data


def _skus(rows: list[dict]) -> list[str]:
    return [r["sku"] for r in rows]


def test_insert_returns_rows_with_defaults_and_generated_columns(client: Client) -> None:
    rows = _seed(client)
    assert _skus(rows) == ["a-1", "a-2", "b-1", "b-2"]
    first = rows[0]
    assert uuid.UUID(first["id"])
    assert first["upper_sku"] == "A-1"
    assert first["meta"] == {}  # the column default, as the row did not send it
    assert first["note"] is None
    assert rows[2]["meta"] == {"k": [1, 2]}
    assert rows[0]["tags"] == ["red", "big"]


def test_a_key_missing_from_one_row_of_a_bulk_insert_is_null(
    client: Client, db: psycopg.Connection
) -> None:
    rows = [{"sku": "n-1", "note": "kept"}, {"sku": "n-2", "price": 1.5}]
    stored = client.table("items").insert(rows).execute().data
    assert [(r["note"], r["price"]) for r in stored] == [("kept", None), (None, 1.5)]
    with pytest.raises(APIError) as caught:  # meta is NOT NULL: sent as null, it fails
        client.table("items").insert([{"sku": "n-3"}, {"sku": "n-4", "meta": {}}]).execute()
    assert caught.value.code == "23502"


def test_insert_minimal_returns_no_rows_but_stores_them(
    client: Client, db: psycopg.Connection
) -> None:
    response = client.table("items").insert({"sku": "m-1", "qty": 2}, returning="minimal").execute()
    assert response.data == []
    assert db.execute("SELECT qty FROM items WHERE sku = 'm-1'").fetchone() == (2,)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda q: q.eq("owner", "ann"), ["a-1", "a-2"]),
        (lambda q: q.neq("owner", "ann"), ["b-1", "b-2"]),
        (lambda q: q.gt("qty", 3), ["a-2", "b-2"]),
        (lambda q: q.gte("qty", 3), ["a-1", "a-2", "b-2"]),
        (lambda q: q.lt("price", 12), ["a-1"]),
        (lambda q: q.lte("price", 12), ["a-1", "a-2"]),
        (lambda q: q.like("sku", "a-*"), ["a-1", "a-2"]),
        (lambda q: q.ilike("note", "*FRAGILE*"), ["b-2"]),
        (lambda q: q.is_("price", None), ["b-1"]),
        (lambda q: q.not_.is_("note", None), ["a-2", "b-2"]),
        (lambda q: q.in_("sku", ["a-1", "b-2", "zzz"]), ["a-1", "b-2"]),
        (lambda q: q.in_("sku", []), []),
        (lambda q: q.contains("tags", ["red"]), ["a-1"]),
        (lambda q: q.contains("meta", {"k": [2]}), ["b-1"]),
        (lambda q: q.or_("qty.eq.1,sku.eq.a-2"), ["a-2", "b-1"]),
        (lambda q: q.or_("owner.eq.bob,and(qty.gt.5,price.gt.10)"), ["a-2", "b-1", "b-2"]),
        (lambda q: q.or_('note.eq."Fragile, (glass)",qty.eq.3'), ["a-1", "b-2"]),
        (lambda q: q.eq("owner", "bob").or_("note.ilike.*glass*,price.is.null"), ["b-1", "b-2"]),
        (lambda q: q.not_.eq("owner", "bob"), ["a-1", "a-2"]),
    ],
)
def test_filters_select_the_same_rows_as_postgrest(client: Client, build, expected) -> None:
    _seed(client)
    rows = build(client.table("items").select("sku")).order("sku").execute().data
    assert _skus(rows) == expected


def test_order_limit_offset_and_exact_count(client: Client) -> None:
    _seed(client)
    query = client.table("items").select("sku,price", count="exact")
    response = query.order("price", desc=True, nullsfirst=False).limit(2).offset(1).execute()
    assert _skus(response.data) == ["a-2", "a-1"]
    assert response.count == 4
    nulls_first = client.table("items").select("sku").order("price", nullsfirst=True).execute()
    assert _skus(nulls_first.data)[0] == "b-1"
    by_two = client.table("items").select("sku").order("owner").order("qty", desc=True).execute()
    assert _skus(by_two.data) == ["a-2", "a-1", "b-2", "b-1"]


def test_select_renames_columns_and_reads_views(client: Client) -> None:
    _seed(client)
    rows = client.table("items").select("code:sku,qty").eq("sku", "a-1").execute().data
    assert rows == [{"code": "a-1", "qty": 3}]
    pricey = client.table("pricey_items").select("*").order("price").execute().data
    assert pricey == [{"sku": "a-2", "price": 12.0}, {"sku": "b-2", "price": 30.25}]


def test_single_returns_an_object_or_pgrst116(client: Client) -> None:
    _seed(client)
    one = client.table("items").select("sku,qty").eq("sku", "b-2").single().execute()
    assert one.data == {"sku": "b-2", "qty": 9}
    with pytest.raises(APIError) as caught:
        client.table("items").select("sku").eq("owner", "ann").single().execute()
    assert caught.value.code == "PGRST116"
    assert client.table("items").select("sku").eq("sku", "none").maybe_single().execute() is None


def test_upsert_merges_on_the_conflict_target(client: Client, db: psycopg.Connection) -> None:
    _seed(client)
    before = db.execute("SELECT id FROM items WHERE sku = 'a-1'").fetchone()
    merged = (
        client.table("items")
        .upsert({"sku": "a-1", "qty": 100, "owner": "bob"}, on_conflict="sku")
        .execute()
        .data
    )
    assert [(r["sku"], r["qty"], r["owner"]) for r in merged] == [("a-1", 100, "bob")]
    assert merged[0]["id"] == str(before[0])  # same row, updated in place
    assert merged[0]["price"] == 5.5  # columns not sent keep their values
    assert db.execute("SELECT count(*) FROM items").fetchone() == (4,)


def test_upsert_ignoring_duplicates_leaves_the_stored_row(
    client: Client, db: psycopg.Connection
) -> None:
    _seed(client)
    response = (
        client.table("items")
        .upsert(
            [{"sku": "a-1", "qty": 55}, {"sku": "new", "qty": 1}],
            on_conflict="sku",
            ignore_duplicates=True,
        )
        .execute()
    )
    assert _skus(response.data) == ["new"]  # the ignored duplicate is not returned
    assert db.execute("SELECT qty FROM items WHERE sku = 'a-1'").fetchone() == (3,)


def test_upsert_without_on_conflict_uses_the_primary_key(client: Client) -> None:
    rows = _seed(client)
    target = rows[1]["id"]
    updated = client.table("items").upsert({"id": target, "sku": "a-2", "qty": 70}).execute()
    assert [(r["id"], r["qty"]) for r in updated.data] == [(target, 70)]


def test_update_and_delete_touch_only_filtered_rows(client: Client, db: psycopg.Connection) -> None:
    _seed(client)
    updated = client.table("items").update({"note": "sold"}).eq("owner", "ann").execute()
    assert sorted(_skus(updated.data)) == ["a-1", "a-2"]
    assert all(r["note"] == "sold" for r in updated.data)
    assert db.execute("SELECT count(*) FROM items WHERE note = 'sold'").fetchone() == (2,)
    deleted = client.table("items").delete().in_("sku", ["b-1", "zzz"]).execute()
    assert _skus(deleted.data) == ["b-1"]
    assert db.execute("SELECT count(*) FROM items").fetchone() == (3,)


def test_unfiltered_update_or_delete_is_refused(client: Client, db: psycopg.Connection) -> None:
    _seed(client)
    with pytest.raises(APIError) as caught:
        client.table("items").delete().execute()
    assert caught.value.code == "21000"
    with pytest.raises(APIError):
        client.table("items").update({"qty": 0}).execute()
    assert db.execute("SELECT count(*) FROM items WHERE qty <> 0").fetchone() == (4,)


def test_rpc_returns_rows_that_can_be_filtered_and_scalars(client: Client) -> None:
    _seed(client)
    rows = client.rpc("items_of", {"who": "bob"}).execute().data
    assert _skus(rows) == ["b-1", "b-2"]
    assert rows[0]["upper_sku"] == "B-1"
    filtered = client.rpc("items_of", {"who": "bob"}).gt("qty", 5).execute().data
    assert _skus(filtered) == ["b-2"]
    assert client.rpc("total_qty", {"who": "ann"}).execute().data == 10
    with pytest.raises(APIError) as caught:
        client.rpc("no_such_function", {"x": 1}).execute()
    assert caught.value.code == "PGRST202"


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (lambda c: c.table("nope").select("*").execute(), "PGRST205"),
        (lambda c: c.table("items").insert({"sku": "a-1"}).execute(), "23505"),
        (lambda c: c.table("items").insert({"sku": "z", "owner": "nobody"}).execute(), "23503"),
        (lambda c: c.table("items").select("*").eq("id", "not-a-uuid").execute(), "22P02"),
        (lambda c: c.table("items").select("*").eq("colour", "red").execute(), "42703"),
        (lambda c: c.table("items").insert({"sku": "q", "colour": "red"}).execute(), "PGRST204"),
        (lambda c: c.table("items").insert({"sku": "q", "upper_sku": "Q"}).execute(), "428C9"),
    ],
)
def test_errors_carry_postgrest_codes(client: Client, action, code: str) -> None:
    _seed(client)
    with pytest.raises(APIError) as caught:
        action(client)
    assert caught.value.code == code
    assert caught.value.message


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/rest/v1/nope", None, 404),
        ("POST", "/rest/v1/items", {"sku": "a-1"}, 409),
        ("POST", "/rest/v1/items", {"sku": "z", "owner": "nobody"}, 409),
        ("GET", "/rest/v1/items?id=eq.not-a-uuid", None, 400),
        ("GET", "/rest/v1/items?order=sku.sideways", None, 400),
        ("POST", "/rest/v1/items", {"sku": "fresh"}, 201),
        ("GET", "/rest/v1/items?select=sku", None, 200),
    ],
)
def test_http_statuses_match_postgrest(
    client: Client, standin: RunningStandIn, method: str, path: str, body, status: int
) -> None:
    _seed(client)
    headers = {"apikey": standin.key, "Authorization": f"Bearer {standin.key}"}
    response = httpx.request(method, standin.url + path, json=body, headers=headers, timeout=10)
    assert response.status_code == status, response.text
    if status >= 400:
        assert set(response.json()) == {"code", "message", "details", "hint"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"apikey": "wrong"}, {"apikey": "<right>", "Authorization": "Bearer wrong"}],
)
def test_a_missing_or_wrong_key_is_rejected_with_401(
    standin: RunningStandIn, db: psycopg.Connection, headers: dict[str, str]
) -> None:
    headers = {k: v.replace("<right>", standin.key) for k, v in headers.items()}
    response = httpx.get(f"{standin.url}/rest/v1/items", headers=headers, timeout=10)
    assert response.status_code == 401
    assert standin.key not in response.text


def test_hostile_values_and_names_never_reach_sql_text(
    client: Client, db: psycopg.Connection
) -> None:
    _seed(client)
    hostile = "x'; DROP TABLE items; --"
    assert client.table("items").select("sku").eq("sku", hostile).execute().data == []
    assert client.table("items").select("sku").or_(f'sku.eq."{hostile}"').execute().data == []
    with pytest.raises(APIError) as caught:
        client.table("items").select('sku,"qty; DROP TABLE items"').execute()
    assert caught.value.code == "42703"
    assert db.execute("SELECT count(*) FROM items").fetchone() == (4,)


def test_a_table_created_after_start_up_is_served(client: Client, db: psycopg.Connection) -> None:
    db.execute("DROP TABLE IF EXISTS late_table")
    db.execute("CREATE TABLE late_table (k int PRIMARY KEY)")
    try:
        assert client.table("late_table").insert({"k": 1}).execute().data == [{"k": 1}]
    finally:
        db.execute("DROP TABLE late_table")


def test_head_range_and_partial_content_follow_postgrest(
    client: Client, standin: RunningStandIn
) -> None:
    _seed(client)
    headers = {"apikey": standin.key, "Authorization": f"Bearer {standin.key}"}
    counted = client.table("items").select("*", count="exact", head=True).execute()
    assert counted.count == 4 and counted.data == []
    ranged = httpx.get(
        f"{standin.url}/rest/v1/items?select=sku&order=sku",
        headers={**headers, "Range": "1-2", "Prefer": "count=exact"},
        timeout=10,
    )
    assert ranged.status_code == 206
    assert ranged.headers["content-range"] == "1-2/4"
    assert [r["sku"] for r in ranged.json()] == ["a-2", "b-1"]


def test_rpc_arguments_can_come_in_the_query_string(client: Client) -> None:
    _seed(client)
    rows = client.rpc("items_of", {"who": "ann"}, get=True).execute().data
    assert _skus(rows) == ["a-1", "a-2"]
