"""Parsing Python source in the parent process, safely from any thread."""

from __future__ import annotations

import ast
import threading
from typing import Any

# CPython 3.11's parser keeps its AST recursion counter in shared state: two threads parsing at
# once can fail with "SystemError: AST constructor recursion depth mismatch". Stores validate
# records (and so parse reference code) from worker threads, so every parse goes through here.
_PARSE_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> Any:
    """ast.parse, one thread at a time. Raises SyntaxError as ast.parse does."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)


def imports_any(module: ast.Module, roots: tuple[str, ...]) -> bool:
    """Whether a parsed module imports (anywhere, even inside a function) a package whose top
    level name is one of `roots`, e.g. ("torch",)."""
    for node in ast.walk(module):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in roots for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
            return True
    return False


def source_imports_any(source: str, roots: tuple[str, ...]) -> bool:
    """imports_any for source text; False when the text is not valid Python."""
    try:
        return imports_any(parse_python(source), roots)
    except SyntaxError:
        return False


def syntax_error(source: str) -> SyntaxError | None:
    """The SyntaxError ast.parse raises on `source` (IndentationError among them), or None
    when it parses. A source with a NUL byte reports it as a SyntaxError too, as the
    interpreter does when it loads such a file."""
    try:
        parse_python(source)
    except SyntaxError as exc:
        return exc
    except ValueError as exc:  # "source code string cannot contain null bytes" (3.11)
        return SyntaxError(str(exc))
    return None


def describe_syntax_error(exc: SyntaxError, where: str) -> str:
    """'<where> line N: <message>', then the offending line with a caret under the column
    where Python found the error, e.g.

        kernel_source line 4: '(' was never closed
            return (x
                   ^
    """
    line = f" line {exc.lineno}" if exc.lineno else ""
    head = f"{where}{line}: {exc.msg or 'invalid syntax'}"
    text = (exc.text or "").rstrip("\r\n")
    if not text.strip():
        return head
    shown = text.expandtabs(4)
    indent = len(shown) - len(shown.lstrip())
    column = max(exc.offset or 1, 1) - 1
    column = min(max(column, indent), len(shown))
    return f"{head}\n    {shown.strip()}\n    {' ' * (column - indent)}^"
