"""Fixtures for the viewer's tests: a run made by the engine with the scripted LLM stand-in,
`accelopt view` as a real subprocess over it, and one headless chromium per module."""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.engine.beam import BeamSearch
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.engine import kernels
from tests.engine.conftest import (
    KERNEL_PATH,
    KEY,
    KEY_ENV,
    TASK_PATH,
    models_config,
    one_plan_preset,
    settings,
    text,
)
from tests.llm_standin.process import standin_starter
from tests.server_process import end_process
from tests.store.conftest import open_store, shared_standin  # noqa: F401 (a fixture it needs)

REPO = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r"^http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+)$")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
HOSTILE = '</textarea><script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">'
"""Markup a kernel or an LLM could write: shown as text, it must never run."""
RUN_SEARCH: dict[str, Any] = {
    "iterations": 2,
    "beam": 1,
    "plans": 1,
    "attempts": 2,
    "topk": 1,
    "workers": 2,
}
"""The search of the viewer's runs (made in this process or by `accelopt optimize`)."""


def artifacts_dir() -> Path:
    """Where screenshots go: $ACCELOPT_ARTIFACTS, else test-artifacts/ (gitignored; CI keeps
    it)."""
    folder = Path(os.environ.get("ACCELOPT_ARTIFACTS") or REPO / "test-artifacts") / "viewer"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_script() -> dict[str, Any]:
    """A planner whose plans carry hostile markup, an executor that passes, fails and passes
    faster, a summarizer that writes one lesson."""
    plan = f"Vectorize the row loop. {HOSTILE}"
    executor = [
        text(kernels.reply(kernels.FAST)),
        text(kernels.reply(kernels.SYNTAX_ERROR)),
        text(kernels.reply(kernels.MEDIUM)),
        text(kernels.reply(kernels.WRONG)),
    ]
    lesson = (
        '{"title": "one np.exp for all rows", "strategy": "avoid per-row Python work, one '
        'np.exp for all rows", "pseudocode": "for row: f(row) -> f(all rows)"}'
    )
    return {
        "api_key": KEY,
        "roles": {
            "planner": {"replies": [text(plan)], "when_exhausted": "repeat_last"},
            "executor": {"replies": executor, "when_exhausted": "repeat_last"},
            "summarizer": {"replies": [text(lesson)], "when_exhausted": "repeat_last"},
        },
    }


@dataclass
class MadeRun:
    db_path: Path
    run_id: str
    optimize_stdout: str
    """What `accelopt optimize` printed while a viewer served its database."""
    viewer_base: str
    """That viewer's http://127.0.0.1:PORT."""


def make_run(store: KernelStore, folder: Path) -> str:
    """One small run by the real engine in this process, against the stand-in; returns its
    id (for a quick look at the viewer by hand)."""
    os.environ[KEY_ENV] = KEY
    task = load_task(TASK_PATH)
    baseline = load_solution(hostile_kernel(folder), task)
    with standin_starter() as start:
        standin = start(run_script())
        config = settings(models_config(standin.base_url, folder / "models.json"), **RUN_SEARCH)
        run_id = prepare_run(store, task, baseline, config)
        asyncio.run(BeamSearch(store, run_id, output_dir=folder / "out").run())
    return run_id


def hostile_kernel(folder: Path) -> Path:
    """The example silu kernel with hostile markup in a comment, as a kernel may carry."""
    path = folder / KERNEL_PATH.name
    path.write_text(f"# {HOSTILE}\n{KERNEL_PATH.read_text()}")
    return path


@pytest.fixture(scope="session")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> MadeRun:
    """A run made by `accelopt optimize` (a subprocess, against the stand-in) in a SQLite file
    that `accelopt view` serves meanwhile, made once per session."""
    folder = tmp_path_factory.mktemp("viewer-run")
    path = folder / "kernels.db"
    SqliteStore(path).close()
    preset = one_plan_preset(folder / "preset.json", exp_n=2, **RUN_SEARCH)
    with standin_starter() as start, ViewerProcess(str(path)) as viewer:
        standin = start(run_script())
        models = models_config(standin.base_url, folder / "models.json")
        env = {**os.environ, "COLUMNS": "200", KEY_ENV: KEY}
        env.pop("ACCELOPT_STORE", None)
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("accelopt")),
                "optimize",
                hostile_kernel(folder),
                "--task",
                TASK_PATH,
                "--preset",
                preset,
                "--config",
                models,
                "--store",
                path,
                "--output-dir",
                folder / "out",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.match(r"run ([0-9a-f-]{36}) ", done.stdout)
    assert found is not None, done.stdout
    return MadeRun(path, found.group(1), done.stdout, viewer.base)


class ViewerProcess:
    """`accelopt view --store DB --port 0 --no-browser` as a subprocess; `url` is its first
    stdout line. With `open_browser`, without --no-browser: it opens the browser that $BROWSER
    (in `env`) names."""

    def __init__(
        self, store_url: str, *, env: dict[str, str] | None = None, open_browser: bool = False
    ) -> None:
        self.store_url = store_url
        self.env = env
        self.open_browser = open_browser
        self.url = ""
        self.port = 0
        self.token = ""
        self.process: subprocess.Popen[str] | None = None
        self.stderr_text = ""
        """What it wrote to stderr, once it has stopped."""

    def __enter__(self) -> ViewerProcess:
        accelopt = Path(sys.executable).with_name("accelopt")
        command = [str(accelopt), "view", "--store", self.store_url, "--port", "0"]
        self.process = subprocess.Popen(
            command if self.open_browser else [*command, "--no-browser"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(self.env or {})},
        )
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            if selector.select(timeout=0.2):
                self.url = self.process.stdout.readline().strip()
                break
        match = URL_LINE.match(self.url)
        if match is None:
            end_process(self.process, timeout_s=5)
            raise AssertionError(
                f"accelopt view's first line is not its URL: {self.url!r}; stderr: "
                f"{self.process.stderr.read() if self.process.stderr else ''}"
            )
        self.port, self.token = int(match.group(1)), match.group(2)
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            end_process(self.process, timeout_s=10)
            if self.process.stderr is not None:
                self.stderr_text = self.process.stderr.read()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture(scope="module")
def viewer(made_run: MadeRun) -> Iterator[ViewerProcess]:
    with ViewerProcess(str(made_run.db_path)) as process:
        yield process


def chromium_or_skip() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip(
            "chromium is not installed (scripts/test.sh installs it: apt-get install chromium)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for the module (the system's, as CI installs it)."""
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


STORES = pytest.mark.parametrize(
    "any_store",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("supabase", marks=pytest.mark.postgres),
    ],
    indirect=True,
)
"""The data layer on SQLite, on a real PostgreSQL server, and on Supabase (the PostgREST
stand-in in front of that server), opened as the store contract suite opens them."""


@pytest.fixture
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KernelStore]:
    opened = open_store(getattr(request, "param", "sqlite"), request, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope="session")
def silu() -> tuple[Any, Any]:
    task = load_task(TASK_PATH)
    return task, load_solution(KERNEL_PATH, task)
