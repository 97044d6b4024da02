"""Hints name tools and commands that exist.

Scanned: every string in the package's source (messages, help texts, docstrings) and every
Markdown file people and agents read (README, docs, skills, templates, examples, the package's
own). Checked:
- a backticked `accelopt ...` command: each (sub)command exists, and each --option it shows
  belongs to that command;
- a call written into a message after a hint word ("list jobs with list()", "poll status()"):
  the function must be an MCP tool, since that is what a client reading the message can call;
- "call `name`": name must be an MCP tool.
The checkers are tested on wrong hints first, so that a scan that finds nothing means
something.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from accelopt_mcp.cli import _register, app

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accelopt_mcp"
BACKTICKED = re.compile(r"`([^`\n]+)`")
HINT_CALL = re.compile(r"(?<![.\w])([a-z][a-z0-9_]*)\(([^()]*)\)")
HINT_WORD = re.compile(r"\b(with|call|calls|use|via|try|first|see|poll|or|then)\b", re.I)
CALL_TOOL = re.compile(r"\b[Cc]all(?:s|ing)?\s+(?:the\s+(?:MCP\s+)?tool\s+)?`([a-z_][a-z0-9_]*)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def mcp_tool_names() -> set[str]:
    """The tools of every mcp_tools module (each lists its own in TOOLS; the admin ones,
    listed with --admin-tools, in ADMIN_TOOLS)."""
    import accelopt_mcp.mcp_tools as package

    names = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        names.update(tool.name for tool in getattr(module, "TOOLS", ()))
        names.update(tool.name for tool in getattr(module, "ADMIN_TOOLS", ()))
    assert {"start_optimization", "job_status", "list_jobs"} <= names
    return names


def cli_root() -> Any:
    _register()
    return typer.main.get_command(app)


def cli_problem(span: str, root: Any) -> str | None:
    """Why a backticked `accelopt ...` names no real command or option; None when it does."""
    tokens = span.replace("\\|", "|").split()[1:]
    node, index = root, 0
    while index < len(tokens) and hasattr(node, "commands"):
        token = tokens[index]
        if token.startswith("-"):
            break
        names = token.split("|")
        if not all(re.fullmatch(r"[a-z][a-z-]*", name) for name in names):
            break  # a placeholder (RUN, DIR, ..., <dsn>): what follows are arguments
        missing = [name for name in names if name not in node.commands]
        if missing:
            return f"`{node.name}` has no command {', '.join(missing)}"
        node = node.commands[names[0]]
        index += 1
        if len(names) > 1:
            return None  # alternatives: options are those of several commands
    if node is root and not tokens:
        return "no command"
    if hasattr(node, "commands") and node is not root:
        return None  # a group named on its own
    options = {"--help"}
    for param in node.params:
        options.update(param.opts)
        options.update(param.secondary_opts)
    for token in tokens[index:]:
        for option in OPTION.findall(token):
            if option not in options:
                return f"`{node.name}` has no option {option}"
    return None


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def package_strings() -> Iterator[tuple[str, str, bool]]:
    """(where, text, is_message): every string constant (an f-string's placeholders read as
    X); docstrings are not messages."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = _docstring_nodes(tree)
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(
                    part.value if isinstance(part, ast.Constant) else "X" for part in node.values
                )
                yield f"{where}:{node.lineno}", str(text), True
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f"{where}:{node.lineno}", node.value, id(node) not in docstrings


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("docs", "skills", "templates", "examples", "accelopt_mcp"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return files


def problems_in(
    where: str, text: str, is_message: bool, tools: set[str], root: Any, *, calls: bool = True
) -> list[str]:
    found = []
    for match in BACKTICKED.finditer(text):
        span = match.group(1).strip()
        if span.startswith("accelopt "):
            problem = cli_problem(span, root)
            if problem:
                found.append(f"{where}: `{span}`: {problem}")
    for match in CALL_TOOL.finditer(text) if is_message else ():
        if match.group(1) not in tools:
            found.append(f"{where}: {match.group(0)!r}: no MCP tool {match.group(1)}")
    # A message that is code (a launcher script, SQL) has no hints in it.
    if calls and is_message and text.count("\n") < 3:
        for match in HINT_CALL.finditer(text):
            name, args = match.groups()
            if args in ("s", "*") or name in tools:  # "call(s)", "count(*)"
                continue
            before = text[max(0, match.start() - 30) : match.start()]
            if HINT_WORD.search(before):
                found.append(f"{where}: {match.group(0)!r} after {before!r}: no MCP tool {name}")
    return found


def test_the_checkers_catch_wrong_hints() -> None:
    tools, root = mcp_tool_names(), cli_root()
    wrong = {
        "see `accelopt runs lst`": "`runs` has no command lst",
        "run `accelopt optimize K --task T --no-such-flag`": "`optimize` has no option",
        "`accelopt db init\\|wipe`": "`db` has no command wipe",
        "list jobs with list() or poll status()": "no MCP tool list",
        "call `create_run` first": "no MCP tool create_run",
    }
    for text, expected in wrong.items():
        found = problems_in("sample", text, True, tools, root)
        assert found and expected in found[0], (text, found)
    right = (
        "see `accelopt runs show RUN` or `accelopt resume RUN --budget-usd 2`; "
        "`accelopt db export DIR --force`; `accelopt --version`; call `job_status` or poll "
        "job_status(job_id); `accelopt import nkibench DIR`; `accelopt db`"
    )
    assert problems_in("sample", right, True, tools, root) == []


@pytest.mark.parametrize("source", ["package", "markdown"])
def test_hints_name_tools_and_commands_that_exist(source: str) -> None:
    tools, root = mcp_tool_names(), cli_root()
    found: list[str] = []
    if source == "package":
        for where, text, is_message in package_strings():
            found += problems_in(where, text, is_message, tools, root)
    else:
        for path in markdown_files():
            text = path.read_text(encoding="utf-8")
            # Markdown is all hints, but its calls are not scanned: the docs show task
            # functions such as `get_inputs()`.
            where = str(path.relative_to(ROOT))
            found += problems_in(where, text, True, tools, root, calls=False)
    assert not found, "\n".join(dict.fromkeys(found))
