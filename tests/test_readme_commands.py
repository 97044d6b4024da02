"""What the README says the CLI does, checked against the CLI: every `accelopt ...` command it
names exists (its --help answers), every option it names for a command is one of that
command's, and the exit codes it lists are the ones the program uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.cli.optimize import EXIT_CODES, LLM_UNAVAILABLE_EXIT

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
_register()
runner = CliRunner()


def _commands() -> dict[tuple[str, ...], set[str]]:
    """Each command path the README names (`accelopt db best DEF` -> ("db", "best")), with the
    options it names for it; `a|b` alternatives are expanded."""
    found: dict[tuple[str, ...], set[str]] = {}
    for text in re.findall(r"`accelopt ([^`]*)`", README):
        tokens = text.replace("\\|", "|").split()
        path: list[list[str]] = []
        for token in tokens:
            words = token.split("|")
            if not all(re.fullmatch(r"[a-z][a-z-]*", word) for word in words):
                break
            path.append(words)
            if len(path) == 2:
                break
        options = set(re.findall(r"--[a-z][a-z-]*", text))
        if not path:  # `accelopt --version`
            found.setdefault((), set()).update(options)
            continue
        heads = path[0]
        tails = path[1] if len(path) > 1 else [None]
        if len(heads) * len(tails) > 1:
            options = set()  # `memory list|add|remove`: which option is whose is not said
        for head in heads:
            for tail in tails:
                key = (head,) if tail is None else (head, tail)
                found.setdefault(key, set()).update(options)
    return found


COMMANDS = _commands()


def test_the_readme_names_the_commands_a_user_needs() -> None:
    for needed in [("optimize",), ("resume",), ("profile",), ("compare",), ("runs", "show")]:
        assert needed in COMMANDS, sorted(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "(top)")
def test_every_command_and_option_the_readme_names_exists(path: tuple[str, ...]) -> None:
    shown = runner.invoke(app, [*path, "--help"], terminal_width=200)
    if shown.exit_code != 0 and len(path) == 2:
        # `accelopt db best DEF`: a word after a command that has no subcommands is its value.
        path = path[:1]
        shown = runner.invoke(app, [*path, "--help"], terminal_width=200)
    assert shown.exit_code == 0, (path, shown.output)
    for option in COMMANDS.get(tuple(path), ()):
        assert option in shown.output, f"`accelopt {' '.join(path)}` has no {option}"


def test_the_exit_codes_listed_are_the_programs() -> None:
    listed = re.search(r"Exit codes: (.*?)\n\n", README, re.S)
    assert listed is not None
    text = " ".join(listed.group(1).split())
    codes = {int(code) for code in re.findall(r"(?:^|; )(\d+) ", text)}
    used = {*EXIT_CODES.values(), LLM_UNAVAILABLE_EXIT, 2, 75, 130}
    assert codes == used, (codes, used)
