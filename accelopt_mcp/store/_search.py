"""Word search over the optimization memory, the same in every store.

A search text is read as words: runs of letters and digits, lower-cased; everything else
(punctuation, `*`, `"`, `:`, `-`, brackets) only separates words and is never query syntax.
English stop words are dropped (the list is PostgreSQL's `english` one, so that no store
drops a word another keeps). An item matches when every remaining word occurs, in any order
and in any of title, strategy and pseudocode, as the start of a word of the item after English
stemming: "threads" finds "thread", "vector" finds "vectorization", "GEMM thread" finds an
item with "thread" in its title and "gemm" forty words later in its strategy.

Results are ranked best first: words in the title count most, then the strategy, then the
pseudocode (SQLite FTS5: bm25 with column weights; PostgreSQL and Supabase: ts_rank over a
tsvector weighted A, B, C); ties, newest first.

Each store indexes the same words: SQLite's FTS5 table uses the `porter unicode61` tokenizer
(diacritics kept), PostgreSQL's `search_vector` column is `to_tsvector('english', ...)` of
the text with every run of other characters replaced by a space.
"""

from __future__ import annotations

import re

from accelopt_mcp.store.base import UnsearchableTextError

_ENGLISH_STOP = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against
    between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more
    most other some such no nor not only own same so than too very s t can will just don
    should now
"""
STOP_WORDS = frozenset(_ENGLISH_STOP.split())
"""PostgreSQL's english.stop (tsearch_data): the words its `english` configuration leaves out
of every document and query."""

MAX_WORDS = 32
"""Words of one search beyond this are an error (every one must match, so more would only
find nothing, slowly)."""

# Letters and digits of any script; `_` separates words, as it does for FTS5 and PostgreSQL.
_WORD = re.compile(r"[^\W_]+")

# Title, strategy, pseudocode: bm25 column weights (SQLite) and tsvector weights (PostgreSQL).
FTS5_WEIGHTS = (10.0, 5.0, 1.0)


def search_words(text: str | None) -> list[str] | None:
    """The words a search text looks for, in order, each once; None for no text (no text
    filter). Raises UnsearchableTextError for a text that holds no word to look for (only stop
    words, punctuation or symbols), or too many words."""
    if text is None or not text.strip():
        return None
    words = list(dict.fromkeys(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS))
    if not words:
        raise UnsearchableTextError(
            f"the search text {text!r} holds no word to look for: only stop words (the, of, "
            "and, ...), punctuation or symbols; give a word of the items' title, strategy or "
            "pseudocode, e.g. 'vectorize' or 'GEMM thread'"
        )
    if len(words) > MAX_WORDS:
        raise UnsearchableTextError(
            f"the search text has {len(words)} words; at most {MAX_WORDS} (every word must "
            "occur in an item, so give the few that matter)"
        )
    return words


def fts5_query(words: list[str]) -> str:
    """An FTS5 MATCH expression: every word as a quoted prefix term (implicit AND). A word
    holds letters and digits only, so quoting it makes AND, OR, NOT and NEAR plain words."""
    return " ".join(f'"{word}"*' for word in words)
