"""The Python names the Markdown pages give a reader exist: every dotted `accelopt_mcp.x.y`
they mention and every name a Python block imports from the package, so that a snippet copied
from a page does not fail on its first line (examples/README.md once imported load_solution
from the module that does not define it)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    ROOT / name
    for name in subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if "/prompt_templates/" not in name  # prompts to a model, not pages for a reader
)
DOTTED = re.compile(r"\baccelopt_mcp(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _resolves(dotted: str) -> bool:
    """Whether `dotted` is a module, or a module's attribute (its attribute's, ...)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def _named(page: Path) -> set[str]:
    text = page.read_text()
    names = set(DOTTED.findall(text))
    for block in PYTHON_BLOCK.findall(text):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("accelopt_mcp"):
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.startswith("accelopt_mcp"))
    return names


def test_the_pages_name_some_package_names() -> None:
    # The check below passes vacuously if the patterns stop matching.
    assert "accelopt_mcp.tasks.kernels.load_solution" in _named(ROOT / "examples" / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_name_a_page_gives_exists(page: Path) -> None:
    missing = sorted(name for name in _named(page) if not _resolves(name))
    assert not missing, f"{page.relative_to(ROOT)} names what the package lacks: {missing}"
