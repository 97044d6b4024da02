"""`accelopt-mcp install-skill`: what an agent needs to use accelopt-mcp, written from the
installed package (a wheel holds it all): the skill (SKILL.md, into Claude Code's skills
folder) and a `.mcp.json` for a project that starts this installation's `accelopt-mcp` by its
full path (no venv on PATH needed) and passes on the variables the server and its jobs read
(the store, its key, the LLM endpoint, key and model). No secret is written: each is a
`${VAR:-}` that Claude Code expands from the environment it starts in.

An existing `.mcp.json` keeps its other servers; its `accelopt` entry is replaced only with
--force. An existing skill file is replaced only with --force."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

SERVER_NAME = "accelopt"
PASSED_ON = (
    "ACCELOPT_STORE",
    "SUPABASE_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ACCELOPT_MODEL",
    "ACCELOPT_MCP_ROOTS",
)
"""The environment the server and the jobs it starts read: the kernel database and its key,
the default LLM endpoint, its key and model, and where tools may read files."""


class InstallError(Exception):
    """What could not be written, and what to do (one line)."""


def server_command() -> str:
    """The full path of this installation's `accelopt-mcp`: beside the running interpreter
    (a venv's bin/), else as found on PATH."""
    beside = Path(sys.executable).parent / "accelopt-mcp"
    if beside.is_file():
        return str(beside)
    found = shutil.which("accelopt-mcp")
    if found is None:
        raise InstallError(
            "accelopt-mcp is neither beside this Python nor on PATH: install the package "
            "(pip install accelopt-mcp) into the environment you run this from"
        )
    return str(Path(found).resolve())


def server_entry(command: str) -> dict[str, Any]:
    return {
        "type": "stdio",
        "command": command,
        "args": [],
        "env": {name: f"${{{name}:-}}" for name in PASSED_ON},
    }


def write_mcp_json(project: Path, command: str, *, force: bool = False) -> Path:
    """Add (or, with force, replace) the accelopt server in project/.mcp.json."""
    path = project / ".mcp.json"
    config: dict[str, Any] = {}
    if path.exists():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise InstallError(f"{path} is not valid JSON ({exc}); fix or move it first") from None
        if not isinstance(config, dict) or not isinstance(config.get("mcpServers", {}), dict):
            raise InstallError(f"{path} has no mcpServers object; fix or move it first")
    servers = config.setdefault("mcpServers", {})
    if SERVER_NAME in servers and not force and servers[SERVER_NAME] != server_entry(command):
        raise InstallError(
            f"{path} already has an {SERVER_NAME!r} server; pass --force to replace it"
        )
    servers[SERVER_NAME] = server_entry(command)
    project.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def write_skill(skills_dir: Path, *, force: bool = False) -> Path:
    """The skill's files (from the package) into skills_dir/accelopt/."""
    source = resources.files("accelopt_mcp").joinpath("agent_files", SERVER_NAME, "SKILL.md")
    target = skills_dir / SERVER_NAME / "SKILL.md"
    text = source.read_text(encoding="utf-8")
    if target.exists() and not force and target.read_text(encoding="utf-8") != text:
        raise InstallError(f"{target} exists and differs; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="accelopt-mcp install-skill",
        description="Write the accelopt skill and a project's .mcp.json for Claude Code.",
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=Path.cwd(),
        help="The project whose .mcp.json gets the server (default: this folder).",
    )
    parser.add_argument(
        "--skills-dir",
        type=Path,
        default=Path.home() / ".claude" / "skills",
        help="Where Claude Code reads skills (default: ~/.claude/skills).",
    )
    parser.add_argument("--no-skill", action="store_true", help="Only the .mcp.json.")
    parser.add_argument("--no-mcp-json", action="store_true", help="Only the skill.")
    parser.add_argument("--force", action="store_true", help="Replace what differs.")
    args = parser.parse_args(argv)
    try:
        if not args.no_mcp_json:
            command = server_command()
            path = write_mcp_json(args.project.expanduser(), command, force=args.force)
            print(f"wrote {path}: the {SERVER_NAME!r} server runs {command}")
        if not args.no_skill:
            print(f"wrote {write_skill(args.skills_dir.expanduser(), force=args.force)}")
    except (InstallError, OSError) as exc:
        print(f"accelopt-mcp install-skill: {exc}", file=sys.stderr)
        return 2
    print(f"passed on from the environment Claude Code starts in: {', '.join(PASSED_ON)}")
    return 0
