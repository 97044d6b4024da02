"""The check a summarizer's lesson passes before it is stored in optimization memory.

The summarizer reads two kernels written by an LLM (fenced as data, engine.untrusted), but a
model can still be talked into repeating what a kernel's comment told it. A stored lesson is
shown to every later planner, so it is checked here, twice:

1. It must not give instructions about anything other than the kernel's own code: the
   evaluator or harness, timing and measurement, the environment, the sandbox, secrets,
   the network, or the model's instructions (`_FORBIDDEN`).
2. It must describe the code change of its pair (`grounded_in_diff`).
"""

from __future__ import annotations

import difflib
import io
import keyword
import re
import tokenize

from accelopt_mcp.pysource import parse_python

_FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern, re.IGNORECASE))
    for reason, pattern in (
        ("it is about the evaluator or harness", r"\b(evaluat(or|ion)s?|harness|grader|judge)\b"),
        (
            "it is about timing or measurement",
            r"\b(perf_counter\w*|monotonic\w*|process_time\w*|timeit|clock_gettime|time\.time"
            r"|time\.sleep|timing|timers?|stopwatch)\b"
            r"|\b(bypass|spoof|fake|cheat|trick|fool|defeat|circumvent|tamper)\w*\b.{0,60}"
            r"\b(measur\w*|tim(e|es|ed|ing)|verif\w*|correctness|checks?|tests?)\b",
        ),
        (
            "it is about the environment or interpreter",
            r"\b(os\.environ|environ|getenv|env(ironment)?\s+var\w*|LD_PRELOAD|PYTHONPATH"
            r"|sys\.modules|builtins|__import__|monkey-?patch\w*|patch(es|ed|ing)?|subprocess"
            r"|os\.system|/proc|/etc)\b",
        ),
        ("it is about the sandbox", r"\b(sandbox\w*|jail\w*|bwrap|bubblewrap|seccomp|escape)\b"),
        (
            "it is about secrets",
            r"\b(secrets?|api[ _-]?keys?|access[ _-]?tokens?|auth\w*[ _-]?tokens?|bearer"
            r"|passwords?|credentials?)\b",
        ),
        (
            "it is about the network",
            r"\b(network\w*|sockets?|https?://|urllib|requests\.\w+|curl|wget|download\w*"
            r"|upload\w*)\b",
        ),
        (
            "it tells the model to ignore its instructions",
            r"\b(ignore|disregard|forget|override)\b.{0,40}\b(instructions?|prompts?|rules?"
            r"|guidelines?)\b|\bsystem prompt\b|\byou are now\b|\bnote to (the )?"
            r"(summari[sz]er|planner|executor|model|assistant)\b",
        ),
    )
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MIN_TOKEN = 3
"""Shorter names (x, i, np, out's like) are in nearly every line: matching one says nothing."""


def forbidden_reason(text: str) -> str | None:
    """Why the lesson text is refused as an instruction about something other than the
    kernel's code, or None."""
    for reason, pattern in _FORBIDDEN:
        match = pattern.search(text)
        if match is not None:
            # The matched phrase, cut short: enough to tell why, no more of the text.
            return f"{reason} ({match.group(0)[:40]!r})"
    return None


def _code_names(source: str, lines: set[int]) -> set[str]:
    """The identifiers (lower-cased) on the given 1-based lines of `source`, comments and
    string literals left out: a lesson grounded in a word of a comment is not grounded in
    the code. Python through its tokenizer; other languages (or source it cannot read) by a
    regex with // and # comments and quoted strings removed."""
    names: set[str] = set()
    try:
        # The Python tokenizer reads C as well (// is an operator), comments and all: only
        # source that parses as Python takes this path.
        parse_python(source)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and token.start[0] in lines:
                names.add(token.string.lower())
        return {n for n in names if not keyword.iskeyword(n) and len(n) >= _MIN_TOKEN}
    except (tokenize.TokenError, SyntaxError, ValueError):
        names.clear()
    text_lines = source.splitlines()
    for number in lines:
        if 0 < number <= len(text_lines):
            line = re.sub(r'"[^"]*"|\'[^\']*\'', " ", text_lines[number - 1])
            line = re.split(r"//|#", line, maxsplit=1)[0]
            names.update(w.lower() for w in _WORD.findall(line))
    return {n for n in names if not keyword.iskeyword(n) and len(n) >= _MIN_TOKEN}


def changed_names(slow: str, fast: str) -> set[str]:
    """The identifiers on the lines the diff from `slow` to `fast` changes, on either side
    (a removed loop counts: "replaced the row loop" names what was taken out)."""
    slow_lines, fast_lines = slow.splitlines(), fast.splitlines()
    matcher = difflib.SequenceMatcher(a=slow_lines, b=fast_lines, autojunk=False)
    on_slow: set[int] = set()
    on_fast: set[int] = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            on_slow.update(range(i1 + 1, i2 + 1))
            on_fast.update(range(j1 + 1, j2 + 1))
    return _code_names(slow, on_slow) | _code_names(fast, on_fast)


def grounded_in_diff(lesson: str, slow: str, fast: str) -> bool:
    """Whether the lesson names at least one identifier (a function, an API, a variable; three
    characters or more, case ignored, Python keywords aside) that occurs in the code, not the
    comments or strings, of the lines the pair's diff changes.

    Why this is sound as a floor: a lesson about the code change has to say what changed, and
    what changed is spelled by those identifiers ("np.einsum", "row", "astype"); a lesson whose
    every name is absent from the changed code talks about something the pair does not show,
    e.g. the evaluator, or a comment's story. Comments are left out so that a kernel cannot
    ground an injected lesson by writing its words into a comment. It is a floor, not a proof
    that the lesson is right: a lesson can name a changed identifier and still be wrong, which
    is why the forbidden-topic check runs as well."""
    names = changed_names(slow, fast)
    return any(word.lower() in names for word in _WORD.findall(lesson))


def lesson_refusal(lesson: str, slow: str, fast: str) -> str | None:
    """Why the lesson (title, strategy and pseudocode, joined) may not be stored, or None."""
    reason = forbidden_reason(lesson)
    if reason is not None:
        return reason
    if not grounded_in_diff(lesson, slow, fast):
        return "it names nothing that the pair's code change touches"
    return None
