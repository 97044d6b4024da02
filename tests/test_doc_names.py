"""The Python names the Markdown pages give a reader exist: every dotted `accelopt_mcp.x.y`
they mention and every name a Python block imports from the package, so that a snippet copied
from a page does not fail on its first line (examples/README.md once imported load_solution
from the module that does not define it); and every code name docs/architecture.md's guides
give is in the code (they once named the SQL stores' base class by a name it had lost)."""

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


THIS = str(Path(__file__).resolve().relative_to(ROOT))
CODE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_code_name(word: str) -> bool:
    """snake_case with an underscore, or CamelCase: a word prose would not use."""
    return ("_" in word.strip("_") or word.startswith("_")) or bool(
        re.fullmatch(r"[A-Z][a-z0-9]+[A-Z]\w*", word)
    )


def test_every_code_name_the_architecture_guides_give_is_in_the_code() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    # A name may be a file or folder (`test_batch` of tests/store/test_batch.py) or anything
    # the code, SQL or scripts spell out.
    known = {part.split(".")[0] for path in tracked for part in path.split("/")}
    code = "\n".join(
        (ROOT / path).read_text(errors="replace")
        for path in tracked
        if path.endswith((".py", ".txt", ".sql", ".sh", ".toml")) and path != THIS
    )
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = {
        word
        for span in re.findall(r"`([^`]+)`", page)
        for word in CODE_WORD.findall(span)
        if _is_code_name(word)
    }
    assert "KernelStore" in named and "resolve_optimize_config" in named  # the scan works
    missing = sorted(w for w in named if w not in known and not re.search(rf"\b{w}\b", code))
    assert not missing, f"docs/architecture.md names what the code lacks: {missing}"
