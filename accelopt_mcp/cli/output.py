"""What the CLI prints: one console for stdout and one for stderr, lines that are never read as
markup nor wrapped, errors that exit, and JSON.

User text (paths, names, errors, hints such as `pip install 'accelopt-mcp[flashinfer]'`) is
never read as rich markup: print it with say() / fail(), or as a rich Text, never inside a
markup string. Lines are not wrapped, so a path or id stays whole under a pipe too."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


def say(*parts: str | Text | tuple[str, str], err: bool = False) -> None:
    """One line, its parts joined as they are: a str or Text is shown verbatim, a (text,
    style) pair in that rich style (e.g. ("error:", "bold red")). No markup is interpreted and
    the line is not wrapped."""
    line = Text.assemble(*parts)
    (err_console if err else console).print(line, soft_wrap=True, highlight=False)


def plain(text: object) -> Text:
    """A table cell or title that shows `text` as it is (no markup)."""
    return Text(str(text))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on stderr (verbatim, one line) and exit with `code`."""
    say(("error:", "bold red"), " ", message, err=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    if isinstance(data, BaseModel):
        text = data.model_dump_json(indent=2)
    else:
        text = json.dumps(data, indent=2, default=_jsonable)
    typer.echo(text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


class Table(RichTable):
    """A rich table that never cuts a cell: a long id, name or command folds onto the next
    line of its cell instead of ending in an ellipsis (80 columns cut every solution id and
    the fix command of `accelopt backends` before)."""

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)

    def add_id_column(self, header: str = "id") -> None:
        """A column of ids shown as their first SHORT_ID characters, kept on one line: what
        every command takes back (`--json` gives them whole)."""
        super().add_column(header, no_wrap=True, min_width=SHORT_ID)


SHORT_ID = 8
"""How many characters of an id a table shows: every command takes them back."""


def short_id(value: str) -> str:
    return value[:SHORT_ID]
