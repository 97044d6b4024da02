"""From a wheel alone: the wheel holds the skill, and `accelopt-mcp install-skill` writes it and
a project's .mcp.json that starts this installation's server by its full path and passes the
model variables on. The wheel is built and installed (into a folder of its own) for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from accelopt_mcp.install_skill import PASSED_ON, InstallError, write_mcp_json

REPO = Path(__file__).resolve().parents[1]
SKILL = REPO / "accelopt_mcp" / "agent_files" / "accelopt" / "SKILL.md"
PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]


def test_the_wheel_alone_installs_the_skill_and_the_mcp_json(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("accelopt_mcp-*.whl")
    assert "accelopt_mcp/agent_files/accelopt/SKILL.md" in zipfile.ZipFile(wheel).namelist()
    site = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr

    # The wheel's package, not this checkout's, run from a folder outside the checkout.
    project, skills = tmp_path / "project", tmp_path / "skills"
    code = (
        "import sys, accelopt_mcp; print(accelopt_mcp.__file__);"
        "from accelopt_mcp.server import main; main(sys.argv[1:])"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "install-skill",
            "--project",
            str(project),
            "--skills-dir",
            str(skills),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(str(site))
    assert (skills / "accelopt" / "SKILL.md").read_text() == SKILL.read_text()
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["accelopt"]
    command = Path(server["command"])
    assert command.is_absolute() and command.name == "accelopt-mcp" and command.is_file()
    assert os.access(command, os.X_OK)
    assert {"ACCELOPT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"} <= set(server["env"])
    assert all(value == f"${{{name}:-}}" for name, value in server["env"].items())


def test_an_existing_mcp_json_keeps_its_other_servers(tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    other = {"type": "stdio", "command": "other-server"}
    path.write_text(json.dumps({"mcpServers": {"other": other}}))
    write_mcp_json(tmp_path, "/opt/venv/bin/accelopt-mcp")
    servers = json.loads(path.read_text())["mcpServers"]
    assert servers["other"] == other
    assert set(servers["accelopt"]["env"]) == set(PASSED_ON)
    # Another accelopt entry is replaced only when asked to.
    with pytest.raises(InstallError, match="--force"):
        write_mcp_json(tmp_path, "/elsewhere/accelopt-mcp")
    write_mcp_json(tmp_path, "/elsewhere/accelopt-mcp", force=True)
    assert json.loads(path.read_text())["mcpServers"]["accelopt"]["command"] == (
        "/elsewhere/accelopt-mcp"
    )
    path.write_text("{not json")
    with pytest.raises(InstallError, match="not valid JSON"):
        write_mcp_json(tmp_path, "/opt/venv/bin/accelopt-mcp")
