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
