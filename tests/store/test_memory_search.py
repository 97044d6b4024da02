"""Memory search is a word search, the same in every store (SQLite FTS5, PostgreSQL full-text
search, Supabase through PostgREST and the schema's search function): every word of the text,
in any order, anywhere in title, strategy or pseudocode; ranked best first."""

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


def test_every_word_in_any_order_ranked_best_first(
    store: KernelStore, items: dict[str, str]
) -> None:
    # Both words in the title (SQLite's bm25 ranks the shorter of these first, ts_rank the
    # newer: not compared here), then both in the strategy (far apart), then in the
    # pseudocode; items with one of the words only are not found.
    ranked = _names(store, items, "GEMM thread")
    assert set(ranked[:3]) == {"title", "other_namespace", "other_definition"}
    assert ranked[3:] == ["far", "pseudocode"]
    assert _names(store, items, "thread GEMM") == ranked
    assert _names(store, items, "  gemm,   THREAD! ") == ranked  # case, punctuation
    # A word is the start of a word after stemming: threads, thread, threading alike.
    assert _names(store, items, "threading gemms") == ranked
    assert _names(store, items, "vector") == ["vectorize"]
    assert _names(store, items, "np.dot") == ["vectorize"]  # "np" and "dot", as written
    assert _names(store, items, "GEMM cuda") == []
    # Filters apply before the ranking is cut.
    assert _names(store, items, "GEMM thread", namespace="cpu") == ["title", "far", "pseudocode"]
    assert _names(store, items, "GEMM thread", definition_name="other") == ["other_definition"]
    assert _names(store, items, "GEMM thread", limit=2) == ranked[:2]
    assert store.remove_experience(items["title"])
    assert _names(store, items, "GEMM thread") == [n for n in ranked if n != "title"]
    assert _names(store, items, "GEMM thread", include_removed=True) == ranked
    # No text: every item not removed, newest first.
    assert _names(store, items, None) == [k for k in reversed(items) if k != "title"]
    assert _names(store, items, "   ") == _names(store, items, None)


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

    # Operators of FTS5 (OR, NOT, AND, quotes, -) and of tsquery (& | ! :*) are stop words or
    # separators: "tile OR fuse" wants both words, "NOT" and "AND" are stop words.
    assert found("tile OR fuse") == ["fuse"]  # "tiled" starts with "tile" once stemmed
    assert found("NOT tile") == ["fuse", "tile"]
    assert found('fuse" OR "tile') == ["fuse"]
    assert found("(tile) AND -fuse") == ["fuse"]
    assert found("tile:* & !fuse | x") == []  # x: no word of fuse's starts with it
    assert found("a*b literal") == ["glob"]  # "*" is no wildcard: words "b", "literal"
    assert found("x_y 100%") == ["glob"]
    assert found("ÉMOJI café") == ["accent"]
    for text in ("the of and", "%%% *** ---", "✓ ✓"):
        with pytest.raises(UnsearchableTextError, match="no word to look for") as caught:
            store.search_experiences(text=text)
        assert isinstance(caught.value, StoreError) and isinstance(caught.value, ValueError)
    with pytest.raises(UnsearchableTextError, match="at most 32"):
        store.search_experiences(text=" ".join(f"w{i}" for i in range(33)))
