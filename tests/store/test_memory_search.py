"""Memory search is a word search, the same in every store (SQLite FTS5, PostgreSQL full-text
search, Supabase through PostgREST and the schema's search function): the words of the text,
in any order, anywhere in title, strategy or pseudocode; an item holding any of them is found,
ranked by how many it holds, then by where (title first)."""

from __future__ import annotations

import pytest

from accelopt_mcp.store.base import (
    ExperienceIn,
    KernelStore,
    StoreError,
    UnsearchableTextError,
)
from accelopt_mcp.store.supabase import SupabaseStore
from tests.store.samples import make_definition

DEF = "gemm_f32"
# "thread" and "GEMM" forty words apart, in the opposite order of the query.
FAR_APART = (
    "Split the rows of C so that each thread owns a band; "
    + " ".join(f"step{i}" for i in range(40))
    + "; the GEMM panel then stays in its core's cache."
)


@pytest.fixture
def items(store: KernelStore) -> dict[str, str]:
    """Items of a GEMM definition (and one of another), by name -> id, in insertion order."""
    store.upsert_definition(make_definition(DEF))
    store.upsert_definition(make_definition("other"))

    def add(title: str, strategy: str, pseudocode: str = "", **fields: object) -> str:
        fields.setdefault("definition_name", DEF)
        return store.add_experience(
            ExperienceIn(title=title, strategy=strategy, pseudocode=pseudocode, **fields)
        )

    return {
        "far": add("Tile the matrix multiply", FAR_APART),
        "title": add("GEMM threads", "One block of rows per core."),
        "pseudocode": add("Blocked loops", "Block both loops.", "gemm(a, b) -> thread pool"),
        "gemm_only": add("GEMM in float32", "Avoid float64 temporaries."),
        "thread_only": add("Thread pool", "Reuse the workers between calls."),
        "other_namespace": add("GEMM thread count", "One per core.", namespace="nki"),
        "other_definition": add(
            "Threads for GEMM", "Pin them.", definition_name="other", namespace="nki"
        ),
        "vectorize": add("Vectorize the row loop", "np.dot instead of a Python loop."),
    }


def _names(
    store: KernelStore, items: dict[str, str], text: str | None, **filters: object
) -> list[str]:
    by_id = {v: k for k, v in items.items()}
    found = store.search_experiences(text=text, **filters)  # type: ignore[arg-type]
    return [by_id[e.id] for e in found]


def test_items_holding_more_of_the_words_rank_first(
    store: KernelStore, items: dict[str, str]
) -> None:
    # Both words in the title (SQLite's bm25 ranks the shorter of these first, ts_rank the
    # newer: not compared here), then both in the strategy (far apart), then in the
    # pseudocode; then the items holding one of the words only, title before strategy.
    ranked = _names(store, items, "GEMM thread")
    assert set(ranked[:3]) == {"title", "other_namespace", "other_definition"}
    assert ranked[3:5] == ["far", "pseudocode"]
    assert set(ranked[5:]) == {"gemm_only", "thread_only"}
    assert _names(store, items, "thread GEMM") == ranked
    assert _names(store, items, "  gemm,   THREAD! ") == ranked  # case, punctuation
    # A word is the start of a word after stemming: threads, thread, threading alike.
    assert _names(store, items, "threading gemms") == ranked
    # A plural beside its singular is one word: it does not count twice.
    assert _names(store, items, "GEMM thread threads") == ranked
    assert _names(store, items, "vector") == ["vectorize"]
    assert _names(store, items, "np.dot") == ["vectorize"]  # "np" and "dot", as written
    # A word no item holds takes nothing away: the items holding the others are found.
    partial = _names(store, items, "GEMM cuda")
    assert set(partial) == {
        "title", "other_namespace", "other_definition", "far", "pseudocode", "gemm_only"
    }  # fmt: skip
    assert _names(store, items, "cuda tensorcore") == []
    # Filters apply before the ranking is cut.
    assert _names(store, items, "GEMM thread", namespace="cpu") == [
        "title", "far", "pseudocode", *[n for n in ranked[5:]]
    ]  # fmt: skip
    assert _names(store, items, "GEMM thread", definition_name="other") == ["other_definition"]
    assert _names(store, items, "GEMM thread", limit=2) == ranked[:2]
    assert store.remove_experience(items["title"])
    assert _names(store, items, "GEMM thread") == [n for n in ranked if n != "title"]
    assert _names(store, items, "GEMM thread", include_removed=True) == ranked
    # No text: every item not removed, newest first.
    assert _names(store, items, None) == [k for k in reversed(items) if k != "title"]
    assert _names(store, items, "   ") == _names(store, items, None)


def test_what_an_agent_searched_for_finds_the_partial_matches(store: KernelStore) -> None:
    # The searches that found nothing while every word had to match.
    store.upsert_definition(make_definition(DEF))
    elementwise = store.add_experience(
        ExperienceIn(
            definition_name=DEF,
            title="Fuse elementwise steps with out= buffers",
            strategy="One preallocated buffer for every elementwise ufunc; no temporaries.",
        )
    )
    reuse = store.add_experience(
        ExperienceIn(
            definition_name=DEF,
            title="Reuse the output buffer",
            strategy="Write into the caller's array instead of allocating.",
        )
    )
    store.add_experience(ExperienceIn(definition_name=DEF, title="Tile GEMM", strategy="64x64"))
    found = [e.id for e in store.search_experiences(text="gelu tanh elementwise")]
    assert found == [elementwise]
    found = [e.id for e in store.search_experiences(text="buffer reuse")]
    assert found[:2] == [reuse, elementwise]  # both words first, then one


def test_equal_matches_rank_newest_first_and_page_in_order(store: KernelStore) -> None:
    store.upsert_definition(make_definition(DEF))
    ids = [
        store.add_experience(ExperienceIn(definition_name=DEF, title="Pool", strategy="reuse"))
        for _ in range(5)
    ]
    best = store.add_experience(
        ExperienceIn(definition_name=DEF, title="Pool reuse", strategy="reuse the pool")
    )
    if isinstance(store, SupabaseStore):
        store.page_size = 2  # the search's rows come page by page, ranked across pages
    found = [e.id for e in store.search_experiences(text="pool reuse", limit=5)]
    assert found == [best, *reversed(ids)][:5]


def test_the_text_is_words_never_query_syntax(store: KernelStore) -> None:
    store.upsert_definition(make_definition(DEF))
    titles = {
        "tile": ("Tile the loop", "blocks of 64"),
        "fuse": ("Fuse", "fuse the tiled loops"),
        "glob": ("literal a*b here", "100% of x_y"),
        "accent": ("Émoji ✓ café", "unicode"),
    }
    ids = {
        store.add_experience(ExperienceIn(definition_name=DEF, title=t, strategy=s)): name
        for name, (t, s) in titles.items()
    }

    def found(text: str) -> list[str]:
        return sorted(ids[e.id] for e in store.search_experiences(text=text))

    def ranked(text: str) -> list[str]:
        return [ids[e.id] for e in store.search_experiences(text=text)]

    # Operators of FTS5 (OR, NOT, AND, quotes, -) and of tsquery (& | ! :*) are stop words or
    # separators: "tile OR fuse" looks for two words, "NOT" and "AND" are stop words. "fuse"
    # holds both ("tiled" starts with "tile" once stemmed), so it ranks first.
    assert ranked("tile OR fuse") == ["fuse", "tile"]
    assert found("NOT tile") == ["fuse", "tile"]
    assert ranked('fuse" OR "tile') == ["fuse", "tile"]
    assert ranked("(tile) AND -fuse") == ["fuse", "tile"]
    # x: a word of glob's ("x_y" is "x" and "y"), of no other.
    assert ranked("tile:* & !fuse | x")[0] == "fuse"
    assert found("tile:* & !fuse | x") == ["fuse", "glob", "tile"]
    # "*" is no wildcard: "a" is a stop word, "b" a word (and the start of tile's "blocks").
    assert ranked("a*b literal") == ["glob", "tile"]
    assert found("x_y 100%") == ["glob"]
    assert found("ÉMOJI café") == ["accent"]
    for text in ("the of and", "%%% *** ---", "✓ ✓"):
        with pytest.raises(UnsearchableTextError, match="no word to look for") as caught:
            store.search_experiences(text=text)
        assert isinstance(caught.value, StoreError) and isinstance(caught.value, ValueError)
    with pytest.raises(UnsearchableTextError, match="at most 32"):
        store.search_experiences(text=" ".join(f"w{i}" for i in range(33)))
