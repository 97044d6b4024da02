"""Word search over the optimization memory, the same in every store.

A search text is read as words: runs of letters and digits, lower-cased; everything else
(punctuation, `*`, `"`, `:`, `-`, brackets) only separates words and is never query syntax.
English stop words are dropped (the list is PostgreSQL's `english` one, so that no store
drops a word another keeps), and a word given twice, or once more with a plural `s`, counts
once. A word matches an item when it occurs, in any of title, strategy and pseudocode, as the
start of a word of the item after English stemming: "threads" finds "thread", "vector" finds
"vectorization". An item matches when at least one word does: a search for "gelu tanh
elementwise" finds the items about elementwise kernels even when none mentions gelu.

Results are ranked best first: by how many of the words the item holds ("GEMM thread" puts an
item with "thread" in its title and "gemm" forty words later in its strategy before one with
"gemm" only), then by where they occur: words in the title count most, then the strategy, then
the pseudocode (SQLite FTS5: bm25 with column weights; PostgreSQL and Supabase: ts_rank over a
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
"""Words of one search beyond this are an error (each is a query of its own: a text that long
is a document, not a search)."""

# Letters and digits of any script; `_` separates words, as it does for FTS5 and PostgreSQL.
_WORD = re.compile(r"[^\W_]+")

# Title, strategy, pseudocode: bm25 column weights (SQLite) and tsvector weights (PostgreSQL).
FTS5_WEIGHTS = (10.0, 5.0, 1.0)


def _same_word(word: str) -> str:
    """What two spellings of one word share: the word without a plural `s` ("threads" and
    "thread", "buffers" and "buffer"; "class" and "bus" keep theirs). The stores stem every
    word themselves; this only keeps a word given twice from counting twice."""
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def search_words(text: str | None) -> list[str] | None:
    """The words a search text looks for, in order, each once (a plural given beside its
    singular is the same word); None for no text (no text filter). Raises
    UnsearchableTextError for a text that holds no word to look for (only stop words,
    punctuation or symbols), or too many words."""
    if text is None or not text.strip():
        return None
    kept: dict[str, str] = {}
    for word in _WORD.findall(text.lower()):
        if word not in STOP_WORDS:
            kept.setdefault(_same_word(word), word)
    words = list(kept.values())
    if not words:
        raise UnsearchableTextError(
            f"the search text {text!r} holds no word to look for: only stop words (the, of, "
            "and, ...), punctuation or symbols; give a word of the items' title, strategy or "
            "pseudocode, e.g. 'vectorize' or 'GEMM thread'"
        )
    if len(words) > MAX_WORDS:
        raise UnsearchableTextError(
            f"the search text has {len(words)} words; at most {MAX_WORDS}: give the few that "
            "matter (items are ranked by how many of them they hold)"
        )
    return words


def fts5_term(word: str) -> str:
    """One word as an FTS5 prefix term. A word holds letters and digits only, so quoting it
    makes AND, OR, NOT and NEAR plain words."""
    return f'"{word}"*'


def fts5_query(words: list[str]) -> str:
    """An FTS5 MATCH expression for items holding any of the words."""
    return " OR ".join(fts5_term(word) for word in words)
