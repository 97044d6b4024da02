"""The viewer in a real headless chromium (the system's, driven by Playwright), against a run the
engine made with the scripted LLM stand-in, served by `accelopt view` as a subprocess.

One browser for the module; screenshots go to $ACCELOPT_ARTIFACTS/viewer, else
test-artifacts/viewer (tests/viewer/conftest.artifacts_dir)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from accelopt_mcp.engine.runs import worker_id_of
from accelopt_mcp.store.base import ExperienceIn
from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.viewer.serve import remove_redirect, write_redirect
from tests.viewer.conftest import HOSTILE, MadeRun, ViewerProcess, artifacts_dir
from tests.viewer.synthetic import passed, variant, write_broken_run, write_run

TIMEOUT_MS = 20_000


def test_optimize_links_its_run_in_the_viewer_serving_its_database(made_run: MadeRun) -> None:
    """`accelopt optimize` says where to watch the run as it starts and again last (before its
    outcome line), without the token."""
    link = f"watch it: {made_run.viewer_base}/run/{made_run.run_id}"
    lines = made_run.optimize_stdout.splitlines()
    assert lines[1] == link, lines[:3]
    assert lines[-2] == link, lines[-3:]
    assert "token=" not in made_run.optimize_stdout


@pytest.fixture(scope="module")
def page(browser: Any, viewer: ViewerProcess) -> Iterator[Any]:
    """One page of one browser context, opened on the URL the viewer printed (whose page keeps
    the token in this context's localStorage for the viewer's origin)."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.set_default_timeout(TIMEOUT_MS)
    opened.goto(viewer.url)
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


def test_the_printed_url_keeps_its_token_out_of_the_address_bar_and_cookies_and_opens_run_links(
    browser: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    """A fresh browser: a run link without the token says to open the printed URL; the printed
    URL shows the runs, with no token left in the address bar, the history or a cookie; then
    the tokenless run link (what `accelopt optimize` prints) shows the run in that browser."""
    context = browser.new_context()
    try:
        opened = context.new_page()
        opened.set_default_timeout(TIMEOUT_MS)
        run_link = f"{viewer.base}/run/{made_run.run_id}"
        opened.goto(run_link)
        need = opened.locator("[data-need-token]")
        need.wait_for()
        assert "the URL `accelopt view` printed" in need.inner_text()
        assert opened.locator("[data-solution-id]").count() == 0
        opened.goto(viewer.url)
        opened.locator(f'tr[data-run-id="{made_run.run_id}"]').wait_for()
        assert "token" not in opened.url and opened.url == f"{viewer.base}/"
        assert "token" not in opened.evaluate("location.href")
        assert opened.evaluate("localStorage.getItem('accelopt_view_token')") == viewer.token
        assert context.cookies() == []
        opened.goto(run_link)
        opened.wait_for_selector("[data-solution-id]")
        # A second tab of the same browser too.
        other = context.new_page()
        other.set_default_timeout(TIMEOUT_MS)
        other.goto(run_link)
        other.wait_for_selector("[data-solution-id]")
    finally:
        context.close()


def test_the_redirect_file_the_browser_is_opened_on_leads_to_the_runs(
    browser: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    """What `accelopt view` opens the browser on (a file:// page, so that no command line holds
    the token) forwards a real chromium to the printed URL."""
    redirect = write_redirect(viewer.url)
    context = browser.new_context()
    try:
        opened = context.new_page()
        opened.set_default_timeout(TIMEOUT_MS)
        opened.goto(redirect.as_uri())
        opened.locator(f'tr[data-run-id="{made_run.run_id}"]').wait_for()
        assert opened.url == f"{viewer.base}/"
    finally:
        context.close()
        remove_redirect(redirect)
    assert not redirect.parent.exists()


def test_a_stale_token_is_forgotten_and_the_page_says_what_to_open(
    browser: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    """A token kept from an earlier viewer on this port is refused, dropped, and the page says
    to open the printed URL."""
    context = browser.new_context()
    try:
        opened = context.new_page()
        opened.set_default_timeout(TIMEOUT_MS)
        opened.goto(f"{viewer.base}/memory")
        opened.evaluate("localStorage.setItem('accelopt_view_token', 'from-an-earlier-viewer')")
        opened.goto(f"{viewer.base}/run/{made_run.run_id}")
        opened.locator("[data-need-token]").wait_for()
        assert opened.evaluate("localStorage.getItem('accelopt_view_token')") is None
    finally:
        context.close()


def test_open_the_run_click_a_node_see_its_diff_and_profile_and_follow_its_parent(
    page: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    page.goto(viewer.url)  # the URL accelopt view printed, as a person opens it
    assert "token=" not in page.url  # the page took it out of the address bar
    row = page.locator(f'tr[data-run-id="{made_run.run_id}"]')
    row.wait_for()
    assert "completed" in row.inner_text()
    page.screenshot(path=str(artifacts_dir() / "runs.png"), full_page=True)
    page.select_option('select[data-filter="status"]', "completed")
    page.wait_for_url("**/?status=completed")
    row.wait_for()
    row.locator("a").click()
    page.wait_for_selector("[data-solution-id]")
    assert page.url.endswith(f"/run/{made_run.run_id}")
    assert page.locator("#latency-chart [data-reference]").count() == 1
    best = page.locator('[data-solution-id][data-best="1"]')
    assert best.count() == 1
    best_id = best.get_attribute("data-solution-id")
    best.click()
    page.wait_for_selector(f'#node-head[data-node-id="{best_id}"]')
    diff = page.locator("#diff")
    assert diff.locator(".add").count() >= 1 and diff.locator(".del").count() >= 1
    page.click('button[data-tab="profile"]')
    median = page.locator('#profile [data-field="median"]').first.inner_text()
    assert " ms [" in median and "CI" in median
    assert "over the reference" in page.locator("#profile").inner_text()
    page.screenshot(path=str(artifacts_dir() / "node.png"), full_page=True)
    parent = page.locator("[data-parent-link]")
    parent_id = parent.get_attribute("data-parent-link")
    parent.click()
    page.wait_for_selector(f'#node-head[data-node-id="{parent_id}"]')
    assert page.locator(f'#tree .node.selected[data-solution-id="{parent_id}"]').count() == 1
    page.click('button[data-tab^="LLM calls"]')
    calls = page.locator("#calls details, p.muted")
    assert calls.count() >= 1


def test_kernel_and_llm_text_is_shown_as_text_and_never_runs(
    page: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    page.goto(f"{viewer.base}/run/{made_run.run_id}")
    page.wait_for_selector("[data-solution-id]")
    nodes = page.locator("[data-solution-id]")
    shown: list[str] = []
    for index in range(nodes.count()):
        node = nodes.nth(index)
        node_id = node.get_attribute("data-solution-id")
        node.click()
        page.wait_for_selector(f'#node-head[data-node-id="{node_id}"]')
        page.click('button[data-tab="code"]')
        shown.append(page.locator("pre[data-code]").first.inner_text())
        page.click('button[data-tab="plan"]')
        if page.locator("#plan").count():
            shown.append(page.locator("#plan").inner_text())
        page.click('button[data-tab^="LLM calls"]')
        for call in page.locator("#calls details").all():
            call.locator("summary").click()
            call.locator("pre").last.wait_for()
            shown.append(call.inner_text())
    # The markup came through as text, in the code (the initial kernel), the plans and the
    # prompts alike, and ran nowhere.
    assert sum(HOSTILE in text for text in shown) >= 3
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#main script, #main img, #main textarea").count() == 0


def test_a_live_run_gains_a_node_without_a_reload(
    page: Any, viewer: ViewerProcess, made_run: MadeRun, silu: tuple[Any, Any]
) -> None:
    with SqliteStore(made_run.db_path) as store:
        live = write_run(store, *silu, kernels=4, iterations=1, status="running")
        # Held by a live worker (this process), as a run in progress is.
        store.claim_run(live.run_id, worker_id_of(os.getpid()), lease_s=600, statuses=["running"])
        page.goto(f"{viewer.base}/run/{live.run_id}")
        page.wait_for_selector("[data-solution-id]")
        assert page.locator("[data-run-state]").inner_text() == "running"
        before = page.locator("[data-solution-id]").count()
        page.evaluate("window.__not_reloaded = true")
        task, base = silu
        workload = store.list_workloads(task.definition.name)[0].uuid
        new_id = store.upsert_solution(
            variant(base, "live-one"),
            parent_id=live.best_id,
            evolve_metadata={"run_id": live.run_id, "iteration": 2, "plan": "keep going"},
        )
        store.upsert_profile(workload, new_id, passed(0.5), {"seeds": [0]})
        page.wait_for_selector(f'[data-solution-id="{new_id}"]')
        assert page.locator("[data-solution-id]").count() == before + 1
        assert page.evaluate("window.__not_reloaded") is True
        # Its profile, breakdown included.
        page.click(f'[data-solution-id="{new_id}"]')
        page.wait_for_selector(f'#node-head[data-node-id="{new_id}"]')
        page.click('button[data-tab="profile"]')
        breakdown = page.locator("#profile table.breakdown")
        assert "np.exp" in breakdown.inner_text()
        page.screenshot(path=str(artifacts_dir() / "live.png"), full_page=True)


def test_a_half_written_run_shows_what_is_there_and_says_what_is_missing(
    page: Any, viewer: ViewerProcess, made_run: MadeRun, silu: tuple[Any, Any]
) -> None:
    with SqliteStore(made_run.db_path) as store:
        run_id = write_broken_run(store, silu[0])
    page.goto(f"{viewer.base}/run/{run_id}")
    problems = page.locator("[data-problems]")
    problems.first.wait_for()
    said = problems.first.inner_text()
    assert "settings could not be read" in said and "slot entry 1/0/0/0" in said
    assert page.locator("[data-run-state]").inner_text() == "interrupted"
    page.goto(viewer.base)
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    assert "problem" in row.inner_text()


def test_the_memory_page_lists_namespaces_and_searches_and_suites_say_there_are_none(
    page: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    with SqliteStore(made_run.db_path) as store:
        store.add_experience(
            ExperienceIn(
                definition_name="silu_M512_N1024",
                title=f"tile the rows {HOSTILE}",
                strategy="one np.exp for all rows",
                namespace="cpu",
            )
        )
    page.goto(f"{viewer.base}/memory")
    namespace = page.locator('[data-namespace="cpu"]')
    namespace.wait_for()
    assert "(" in namespace.inner_text()  # its item count
    page.fill('input[name="q"]', "tile rows")
    page.press('input[name="q"]', "Enter")
    page.wait_for_url("**/memory?q=tile+rows")
    items = page.locator("#memory-items [data-lesson-id]")
    items.first.wait_for()
    assert all("tile the rows" in text for text in items.all_inner_texts())
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.goto(f"{viewer.base}/suites")
    page.locator("#main", has_text="No suites").wait_for()


def test_sixteen_browsers_at_once_each_see_the_run(
    browser: Any, viewer: ViewerProcess, made_run: MadeRun
) -> None:
    """Sixteen tabs of one browser (one context: they share the token the printed URL's page
    stored) open the run at once and keep polling it."""
    context = browser.new_context()
    try:
        first = context.new_page()
        first.goto(viewer.url)  # stores the token for the context
        pages = [first, *(context.new_page() for _ in range(15))]
        for opened in pages:
            opened.set_default_timeout(TIMEOUT_MS * 2)
            # Without waiting: all sixteen load at once.
            opened.goto(f"{viewer.base}/run/{made_run.run_id}", wait_until="commit")
        for opened in pages:
            opened.wait_for_selector("[data-solution-id]")
            assert opened.locator("[data-solution-id]").count() >= 3
    finally:
        context.close()
