"""`accelopt runs show RUN --calls`, `runs show RUN --call ID` and `runs call ID` on a real
SQLite store: one line per call, and a call's prompt and reply printed as they are."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli.runs import app
from accelopt_mcp.store.base import RunRecord
from accelopt_mcp.store.sqlite import SqliteStore
from tests.store.samples import make_definition, make_llm_call

runner = CliRunner()
T0 = datetime(2026, 3, 1, 9, 30, 0, tzinfo=UTC)
# Rich would read these as markup, an emoji code and a highlight; they must come out as is.
PROMPT = "Optimize [bold]this[/bold] kernel :rocket: [/]\nfor i in range(n): y[i] = x[i] * 2"
REPLY = "Use numpy: ```python\ny[:] = x * 2  # [red]vectorized[/red]\n```"
PLANNER_ID = "c0ffee00" + "a" * 24
EXECUTOR_ID = "c0ffee11" + "b" * 24
OTHER_ID = "c0ffee00" + "c" * 24  # shares its first 8 characters with PLANNER_ID


@pytest.fixture
def db(tmp_path: Path) -> list[str]:
    path = tmp_path / "kernels.db"
    with SqliteStore(path) as store:
        store.upsert_definition(make_definition("d"))
        for run_id in ("run-1", "run-2"):
            store.create_run(RunRecord(id=run_id, definition_name="d"))
        store.add_llm_call(
            make_llm_call(
                PLANNER_ID,
                model="gpt-test",
                status="ok",
                purpose="plan 1/0",
                tokens_in=120,
                tokens_out=30,
                cost_usd=0.0012,
                latency_s=2.5,
                started_at=T0,
                finished_at=T0 + timedelta(seconds=2.5),
                system="You are the planner.",
                prompt=PROMPT,
                reply=REPLY,
            )
        )
        store.add_llm_call(
            make_llm_call(
                EXECUTOR_ID,
                role="executor",
                model="gpt-test",
                status="in_flight",
                purpose="attempt 1/0/0/0",
                tokens_in=400,
                started_at=T0 + timedelta(seconds=3),
                prompt="write it",
            )
        )
        store.add_llm_call(
            make_llm_call(
                OTHER_ID,
                run_id="run-2",
                model="gpt-test",
                ok=False,
                error="HTTP 500: upstream [boom]",
            )
        )
    return ["--store", str(path)]


def test_calls_are_listed_one_line_each(db: list[str]) -> None:
    shown = runner.invoke(app, ["show", "run-1", "--calls", *db], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith("run run-1: 2 LLM calls")
    planner, executor = lines[1], lines[2]
    for text in ("c0ffee00", "2026-03-01 09:30:00", "planner", "plan 1/0", "gpt-test", " ok "):
        assert text in planner
    assert "120/30 tok" in planner and "$0.0012" in planner and "2.50 s" in planner
    assert "attempt 1/0/0/0" in executor and "in_flight" in executor and "~400/0 tok" in executor

    only = runner.invoke(app, ["show", "run-1", "--calls", "--role", "executor", *db])
    assert only.exit_code == 0 and "c0ffee11" in only.output and "c0ffee00" not in only.output

    failed = runner.invoke(app, ["show", "run-2", "--calls", *db], terminal_width=200)
    assert "failed" in failed.output and "HTTP 500: upstream [boom]" in failed.output

    as_json = runner.invoke(app, ["show", "run-1", "--calls", "--json", *db])
    rows = json.loads(as_json.output)
    assert [r["id"] for r in rows] == [PLANNER_ID, EXECUTOR_ID]
    assert rows[0]["purpose"] == "plan 1/0" and "messages" not in rows[0]

    missing = runner.invoke(app, ["show", "nope", "--calls", *db])
    assert missing.exit_code != 0 and "no run with id 'nope'" in missing.output


def test_a_call_is_printed_in_full_without_markup(db: list[str]) -> None:
    shown = runner.invoke(app, ["call", PLANNER_ID[:9], *db], terminal_width=80)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert f"call {PLANNER_ID} of run run-1" in out
    assert "role planner, model gpt-test, purpose plan 1/0" in out
    assert "----- system -----\nYou are the planner.\n" in out
    assert f"----- user -----\n{PROMPT}\n" in out
    assert f"----- reply -----\n{REPLY}\n" in out

    same = runner.invoke(app, ["show", "run-1", "--call", PLANNER_ID, *db], terminal_width=80)
    assert same.exit_code == 0 and same.output == out

    waiting = runner.invoke(app, ["call", EXECUTOR_ID, *db])
    assert "status in_flight" in waiting.output and "400 in (estimated)" in waiting.output
    assert "(no reply)" in waiting.output

    as_json = runner.invoke(app, ["call", PLANNER_ID, "--json", *db])
    detail = json.loads(as_json.output)
    assert detail["messages"][1]["content"] == PROMPT and detail["reply"] == REPLY


def test_unknown_and_ambiguous_calls_are_refused(db: list[str]) -> None:
    unknown = runner.invoke(app, ["call", "ffffffff", *db])
    assert unknown.exit_code != 0 and "no LLM call 'ffffffff'" in unknown.output
    short = runner.invoke(app, ["call", "c0ffee1", *db])  # under 8 characters: no prefix
    assert short.exit_code != 0 and "no LLM call" in short.output
    ambiguous = runner.invoke(app, ["call", "c0ffee00", *db])
    assert ambiguous.exit_code != 0 and "matches more than one call" in ambiguous.output
    assert runner.invoke(app, ["call", "c0ffee11", *db]).exit_code == 0
    other_run = runner.invoke(app, ["show", "run-2", "--call", PLANNER_ID, *db])
    assert other_run.exit_code != 0 and "of run 'run-2'" in other_run.output
