"""Who may talk to the server and what it may read: the HTTP bearer token on loopback (a real
`accelopt-mcp --http` and, for another user, curl run as uid 65534), and path arguments
confined to the server's roots, through the real tools of an in-process MCP client."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from mcp import Client, StdioServerParameters

from accelopt_mcp.llm.config import LlmConfigError
from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
from accelopt_mcp.mcp_tools import run_params
from accelopt_mcp.mcp_tools.roots import ROOTS_ENV, Roots
from accelopt_mcp.mcp_tools.run_params import SNAPSHOT_FOLDER, confined_run_files
from tests.http_listener import serve_in_thread
from tests.mcp.conftest import SILU_FAST, SILU_TASK, TRACE_DIR, served
from tests.mcp.helpers import fails, ok
from tests.mcp.processes import HttpServer, console_script, server_env

pytestmark = pytest.mark.anyio

SECRET = "SECRET-do-not-echo-7f3a9c"
BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
ACCEPT = {"Accept": "application/json, text/event-stream"}


# --------------------------------------------------------------------------- HTTP token


def test_loopback_http_refuses_missing_wrong_and_short_tokens(tmp_path: Path) -> None:
    with HttpServer(str(tmp_path / "k.db")) as server:
        assert server.token
        wrong = "x" * len(server.token)
        for headers in (
            {},
            {"Authorization": f"Bearer {wrong}"},  # same length, wrong
            {"Authorization": f"Bearer {server.token[:-1]}"},  # a different length
            {"Authorization": f"Bearer {server.token}extra"},
            {"Authorization": server.token},  # no scheme
        ):
            denied = httpx.post(server.url, json=BODY, headers={**ACCEPT, **headers}, timeout=5)
            assert denied.status_code == 401, headers
            assert server.token not in denied.text
        allowed = httpx.post(server.url, json=BODY, headers={**ACCEPT, **server.headers}, timeout=5)
        assert allowed.status_code != 401


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_another_user_can_neither_read_the_token_nor_call(tmp_path: Path) -> None:
    """The red team's door: a process as uid 65534 with plain curl, on the same host."""
    with HttpServer(str(tmp_path / "k.db")) as server:
        token_file = server.home / "mcp_token"
        script = (
            f"cat {token_file} 2>/dev/null && echo READ-TOKEN; "
            f"curl -s -o /dev/null -w '%{{http_code}}' -X POST "
            f"-H 'Content-Type: application/json' "
            f"-H 'Accept: application/json, text/event-stream' "
            f"--data '{json.dumps(BODY)}' {server.url}"
        )
        as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        done = subprocess.run(
            [*as_nobody, "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "READ-TOKEN" not in done.stdout and server.token not in done.stdout
        assert done.stdout.strip().endswith("401"), (done.stdout, done.stderr)


# --------------------------------------------------------------------------- path roots


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """root/: the server's one root, with a task; outside/: a 0600 secret beside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    # The whole trace set: the definition's workloads sit beside it.
    shutil.copytree(TRACE_DIR, root / "trace")
    (root / "task.json").symlink_to(root / "trace" / SILU_TASK.relative_to(TRACE_DIR))
    (root / "kernel.json").symlink_to(root / "trace" / SILU_FAST.relative_to(TRACE_DIR))
    secret = outside / "secret.py"
    secret.write_text(f"# {SECRET}\ndef kernel(x):\n    return x\n")
    secret.chmod(0o600)
    (outside / "secret.json").write_text(json.dumps({"name": SECRET, "reference": SECRET}))
    (root / "innocent.py").symlink_to(secret)
    (root / "linked").symlink_to(outside, target_is_directory=True)
    return {"root": root, "outside": outside, "secret": secret}


@pytest.fixture
async def client(layout: dict[str, Path], tmp_path: Path) -> AsyncIterator[Client]:
    roots = Roots.of([layout["root"]])
    async with served(str(tmp_path / "k.db"), tmp_path, roots=roots, admin_tools=True) as c:
        yield c


def escapes(layout: dict[str, Path]) -> list[str]:
    root, secret = layout["root"], layout["secret"]
    return [
        str(root / "innocent.py"),  # a link in the root to a file outside
        str(root / ".." / "outside" / "secret.py"),  # `..`
        str(secret),  # absolute, outside
        str(root / "linked" / "secret.py"),  # through a linked folder
    ]


async def refused(client: Client, tool: str, args: dict[str, Any], arg: str) -> None:
    message = await fails(client, tool, args, arg, "outside the server's roots", "--root")
    assert SECRET not in message


async def test_a_server_started_in_the_filesystem_root_does_not_take_it_as_a_root(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """The default roots are the working directory and ACCELOPT_HOME; a server started from
    / (a service, a container's default) would take the whole filesystem as a root and hand
    back any .py or .json the user can read, word for word, through get_solution."""
    home = tmp_path / "home"
    shutil.copytree(TRACE_DIR, home / "trace")
    task = str(home / "trace" / SILU_TASK.relative_to(TRACE_DIR))
    params = StdioServerParameters(
        command=console_script(),
        args=["--store", str(tmp_path / "k.db")],
        # The default roots: no --root, no $ACCELOPT_MCP_ROOTS (the test session sets one).
        env={k: v for k, v in server_env(ACCELOPT_HOME=str(home)).items() if k != ROOTS_ENV},
        cwd="/",
    )
    async with Client(params) as client:
        args = {"task_path": task, "kernel_path": str(layout["secret"])}
        await refused(client, "profile_kernel", args, "kernel_path")
        # Inside ACCELOPT_HOME, the root that is left, files are read.
        await fails(client, "profile_kernel", {"task_path": task}, "kernel")


async def test_kernel_paths_outside_the_roots_are_refused(
    client: Client, layout: dict[str, Path]
) -> None:
    task = str(layout["root"] / "task.json")
    for path in escapes(layout):
        await refused(
            client, "profile_kernel", {"task_path": task, "kernel_path": path}, "kernel_path"
        )
        kernels = [{"kernel_path": path}, {"kernel_path": str(layout["root"] / "kernel.json")}]
        await refused(
            client, "compare_kernels", {"task_path": task, "kernels": kernels}, "kernels[0]"
        )
        await refused(
            client, "start_optimization", {"task_path": task, "kernel_path": path}, "kernel_path"
        )
        # A round of candidates: each path checked, before the parent is even looked up.
        round_ = {"task_path": task, "parent_id": "0" * 8, "candidates": kernels[::-1]}
        await refused(client, "profile_kernel", round_, "candidates[1].kernel_path")
    # Nothing of the secret was stored.
    await fails(client, "list_solutions", {"definition_name": "silu_n1024"}, "no definition")


async def test_task_and_config_paths_outside_the_roots_are_refused(
    client: Client, layout: dict[str, Path]
) -> None:
    kernel = str(layout["root"] / "kernel.json")
    for path in [*escapes(layout), str(layout["outside"] / "secret.json")]:
        for tool in ("profile_kernel", "start_optimization"):
            await refused(client, tool, {"task_path": path, "kernel_path": kernel}, "task_path")
    task = str(layout["root"] / "task.json")
    outside_json = str(layout["outside"] / "secret.json")
    for arg in ("preset", "models_config"):
        args = {"task_path": task, "kernel_path": kernel, arg: outside_json}
        await refused(client, "start_optimization", args, arg)


async def test_a_preset_in_the_roots_names_no_model_config_outside_them(
    client: Client, layout: dict[str, Path]
) -> None:
    """A preset file is checked, and so must be the model config it names: the settings are
    resolved by loading it, which tells whether a file outside the roots exists and echoes
    the names of its fields."""
    config = layout["outside"] / "models.json"
    config.write_text(json.dumps({"default": {SECRET.replace("-", "_"): 1}}))
    preset = layout["root"] / "preset.json"
    preset.write_text(json.dumps({"models_config": str(config)}))
    task, kernel = str(layout["root"] / "task.json"), str(layout["root"] / "kernel.json")
    args = {"task_path": task, "kernel_path": kernel, "preset": str(preset)}
    message = await fails(client, "start_optimization", args, "models_config", "outside")
    assert SECRET.replace("-", "_") not in message
    suite = {"builtin": "cpu-nkibench", "preset": str(preset)}
    message = await fails(client, "start_suite", suite, "models_config", "outside")
    assert SECRET.replace("-", "_") not in message


async def test_import_directory_stays_in_the_roots(client: Client, layout: dict[str, Path]) -> None:
    await refused(client, "import_directory", {"path": str(layout["outside"])}, "path")
    await refused(client, "import_directory", {"path": str(layout["root"] / "linked")}, "path")
    # A folder inside the root that holds a link out: the whole import is refused.
    await refused(client, "import_directory", {"path": str(layout["root"])}, "entry")


async def test_a_fifo_is_refused_without_blocking(client: Client, layout: dict[str, Path]) -> None:
    fifo = layout["root"] / "fifo.py"
    os.mkfifo(fifo)
    task = str(layout["root"] / "task.json")
    await fails(
        client,
        "profile_kernel",
        {"task_path": task, "kernel_path": str(fifo)},
        "kernel_path",
        "not a regular file",
    )
    await fails(client, "profile_kernel", {"task_path": str(fifo)}, "task_path", "regular file")


async def test_a_json_of_the_wrong_shape_is_refused_without_its_contents(
    client: Client, layout: dict[str, Path]
) -> None:
    task = str(layout["root"] / "task.json")
    bad_solution = layout["root"] / "bad.json"
    bad_solution.write_text(json.dumps({"name": SECRET, "definition": [SECRET]}))
    message = await fails(
        client, "profile_kernel", {"task_path": task, "kernel_path": str(bad_solution)}, "bad.json"
    )
    assert SECRET not in message and "definition" in message
    bad_task = layout["root"] / "badtask.json"
    bad_task.write_text(json.dumps(SECRET))
    message = await fails(client, "profile_kernel", {"task_path": str(bad_task)}, "badtask.json")
    assert SECRET not in message


async def test_paths_inside_the_roots_still_work(client: Client, layout: dict[str, Path]) -> None:
    args = {
        "task_path": str(layout["root"] / "task.json"),
        "kernel_path": str(layout["root"] / "kernel.json"),
        "iterations": 2,
        "store": False,
    }
    report = await ok(client, "profile_kernel", args)
    assert report["correct"] is True, report


async def test_a_task_finds_no_trace_set_above_the_roots(tmp_path: Path) -> None:
    """A definition in a root whose workloads sit in a trace set above it: the server looks
    for them only inside its roots (they would tell what lies above, and be read)."""
    above = tmp_path / "above"
    shutil.copytree(TRACE_DIR, above)
    root = above / "definitions"
    uuid = json.loads((above / "workloads" / "silu_n1024.jsonl").read_text().splitlines()[0])
    uuid = uuid["workload"]["uuid"]
    task = str(root / SILU_TASK.name)
    async with served(str(tmp_path / "k.db"), tmp_path, roots=Roots.of([root])) as client:
        message = await fails(client, "profile_kernel", {"task_path": task}, "silu_n1024")
        assert uuid not in message
    # The same file with the trace set inside the roots finds its workload.
    async with served(str(tmp_path / "k2.db"), tmp_path, roots=Roots.of([above])) as client:
        message = await fails(client, "profile_kernel", {"task_path": task}, "kernel")
        assert "workload" not in message


@pytest.mark.parametrize("link", ["file", "folder"])
async def test_a_trace_set_beside_the_task_reads_no_link_out_of_the_roots(
    link: str, layout: dict[str, Path], tmp_path: Path
) -> None:
    """A definition in a root whose trace set holds a link out of the roots (its workloads
    file, or the whole workloads/ folder): the trace set is read to find the workloads, so
    the link would hand the server's files to the caller (a workload's uuid is listed in the
    error for an unknown one)."""
    root, outside = layout["root"], layout["outside"]
    trace = {
        "definition": "silu_n1024",
        "workload": {"axes": {"M": 512}, "inputs": {"x": {"type": "random"}}, "uuid": SECRET},
    }
    workloads = root / "trace" / "workloads"
    if link == "file":
        (outside / "stolen.jsonl").write_text(json.dumps(trace) + "\n")
        (workloads / "silu_n1024.jsonl").unlink()
        (workloads / "silu_n1024.jsonl").symlink_to(outside / "stolen.jsonl")
    else:
        (outside / "workloads").mkdir()
        (outside / "workloads" / "silu_n1024.jsonl").write_text(json.dumps(trace) + "\n")
        shutil.rmtree(workloads)
        workloads.symlink_to(outside / "workloads", target_is_directory=True)
    task = str(root / "trace" / SILU_TASK.relative_to(TRACE_DIR))
    async with served(str(tmp_path / "k.db"), tmp_path, roots=Roots.of([root])) as client:
        for args in ({"task_path": task, "workload": "nope"}, {"task_path": task}):
            message = await fails(client, "profile_kernel", args, "silu_n1024", "roots")
            assert SECRET not in message


# --------------------------------------------------------------------------- check_database


class _HeaderLog(http.server.BaseHTTPRequestHandler):
    """Records every header sent to it: a local listener posing as a Supabase project."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(str(self.headers))
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[str]:
    _HeaderLog.seen = []
    with serve_in_thread(_HeaderLog) as url:
        yield url


async def test_check_database_hands_no_secret_to_a_url_the_client_names(
    client: Client, layout: dict[str, Path], listener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt-injected agent names a database of the attacker's: the server's Supabase key
    goes nowhere but where it belongs, its PostgreSQL password to no other host, and no SQLite
    file outside the roots is opened (it would tell whether the file exists and its tables)."""
    monkeypatch.setenv("SUPABASE_KEY", SECRET)
    monkeypatch.delenv("SUPABASE_URL", raising=False)
    monkeypatch.setenv("PGPASSWORD", SECRET)
    check = await ok(client, "check_database", {"url": listener})
    assert check["ok"] is False
    assert _HeaderLog.seen, "the check never reached the listener"
    assert not any(SECRET in headers for headers in _HeaderLog.seen)
    assert "sends SUPABASE_KEY only" in check["next_steps"][0]
    # Nor to another port or scheme of the configured project's host: only its very origin.
    host_port = listener.removeprefix("http://")
    monkeypatch.setenv("SUPABASE_URL", f"https://{host_port}")
    _HeaderLog.seen.clear()
    await ok(client, "check_database", {"url": listener})
    assert _HeaderLog.seen and not any(SECRET in headers for headers in _HeaderLog.seen)
    # Where the key belongs (the project the user configured), it is sent.
    monkeypatch.setenv("SUPABASE_URL", listener + "/")
    _HeaderLog.seen.clear()
    await ok(client, "check_database", {"url": listener})
    assert any(SECRET in headers for headers in _HeaderLog.seen)

    # No PostgreSQL server but the server's own: libpq would hand PGPASSWORD to whatever
    # answers, a local user's listener on loopback or a socket folder included.
    for dsn in (
        "postgresql://someone@db.invalid:5432/x",
        "postgresql://someone@127.0.0.1:5999/x",
        "host=/tmp dbname=x",
    ):
        message = await fails(client, "check_database", {"url": dsn}, "url", "its own")
        assert SECRET not in message
    outside = layout["outside"] / "kernels.db"
    sqlite3.connect(outside).execute(f"CREATE TABLE t_{SECRET.replace('-', '_')} (x)").close()
    message = await fails(
        client, "check_database", {"url": str(outside)}, "outside the server's roots"
    )
    assert SECRET.replace("-", "_") not in message


async def test_a_model_config_the_client_names_sends_no_key_where_it_points(
    client: Client,
    layout: dict[str, Path],
    listener: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A prompt-injected agent writes a model config into the project (a root) that points
    every role at a listener of the attacker's, with `api_key_env` naming any variable of the
    server's environment, and starts an optimization with it (directly, or through a preset
    that names it): refused before any call, whatever the variable, and the value goes nowhere.
    A config the server's operator lists is taken, and what the run reads is the copy that was
    checked, so rewriting the file afterwards sends nothing elsewhere either."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SUPABASE_KEY", SECRET)
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(TRUSTED_CONFIGS_ENV, raising=False)
    task, kernel = str(layout["root"] / "task.json"), str(layout["root"] / "kernel.json")
    for variable in ("OPENAI_API_KEY", "SUPABASE_KEY"):
        config = layout["root"] / f"models-{variable}.json"
        endpoint = {"base_url": f"{listener}/v1", "api_key_env": variable}
        config.write_text(json.dumps({"default": endpoint}))
        preset = layout["root"] / f"preset-{variable}.json"
        preset.write_text(json.dumps({"models_config": str(config)}))
        for args in ({"models_config": str(config)}, {"preset": str(preset)}):
            message = await fails(
                client,
                "start_optimization",
                {"task_path": task, "kernel_path": kernel, **args},
                f"the key in {variable}",
                TRUSTED_CONFIGS_ENV,
            )
            assert SECRET not in message
    assert not any(SECRET in headers for headers in _HeaderLog.seen), _HeaderLog.seen
    assert not _HeaderLog.seen  # refused before the LLM check, which would have called

    # The operator lists the config: the same request goes through to the LLM check, which
    # sends the key (the listener answers 404, so the check fails, after the call).
    config = layout["root"] / "models-OPENAI_API_KEY.json"
    monkeypatch.setenv(TRUSTED_CONFIGS_ENV, str(config))
    args = {"task_path": task, "kernel_path": kernel, "models_config": str(config)}
    message = await fails(client, "start_optimization", args)
    assert TRUSTED_CONFIGS_ENV not in message
    assert any(SECRET in headers for headers in _HeaderLog.seen)

    # The copy a run reads is the checked file's bytes, in the server's own folder.
    preset, copied = confined_run_files(Roots.of([layout["root"]]), "quick", str(config))
    assert preset == "quick" and copied is not None
    assert Path(copied).parent == tmp_path / "home" / SNAPSHOT_FOLDER
    assert Path(copied).read_bytes() == config.read_bytes()
    config.write_text(json.dumps({"default": {"base_url": "http://elsewhere.invalid/v1"}}))
    assert "elsewhere" not in Path(copied).read_text()


async def test_a_link_planted_in_the_snapshot_folder_does_not_carry_the_check(
    layout: dict[str, Path], listener: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A client that can write under a root (ACCELOPT_HOME is one by default) knows the name
    the copy of a config will get (a hash of its bytes): it plants a link there to a file of
    its own holding those bytes, names the config, and rewrites its file after the check. The
    copy the run reads must be the server's own file, not the client's through a link."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(TRUSTED_CONFIGS_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    good = layout["root"] / "models.json"
    good.write_text(json.dumps({"default": {"api_key_env": "OPENAI_API_KEY"}}))
    planted = layout["root"] / "planted.json"
    planted.write_bytes(good.read_bytes())
    folder = tmp_path / "home" / SNAPSHOT_FOLDER
    folder.mkdir(parents=True)
    name = hashlib.sha256(good.read_bytes()).hexdigest()[:32]
    (folder / f"{name}.json").symlink_to(planted)
    _, copied = confined_run_files(Roots.of([layout["root"]]), "quick", str(good))
    assert copied is not None
    evil = {"default": {"base_url": f"{listener}/v1", "api_key_env": "OPENAI_API_KEY"}}
    planted.write_text(json.dumps(evil))
    assert not Path(copied).is_symlink()
    assert "base_url" not in Path(copied).read_text()


async def test_a_snapshot_folder_that_is_a_link_is_refused(
    layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same with the whole folder: a link there to a folder of the client's would put
    every copy where the client rewrites it after the check."""
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / SNAPSHOT_FOLDER).symlink_to(layout["root"], target_is_directory=True)
    good = layout["root"] / "models.json"
    good.write_text(json.dumps({"default": {}}))
    with pytest.raises(LlmConfigError, match=SNAPSHOT_FOLDER):
        confined_run_files(Roots.of([layout["root"]]), "quick", str(good))


async def test_a_preset_rewritten_between_its_two_reads_names_no_unchecked_config(
    client: Client,
    layout: dict[str, Path],
    listener: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The preset file is read to find the model config to check, then read again for the
    run's settings: a client rewriting it in between (here, at once after the first read)
    must not have the second read's model config taken unchecked."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ACCELOPT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(TRUSTED_CONFIGS_ENV, raising=False)
    evil = layout["root"] / "evil.json"
    endpoint = {"base_url": f"{listener}/v1", "api_key_env": "OPENAI_API_KEY"}
    evil.write_text(json.dumps({"default": endpoint}))
    preset = layout["root"] / "preset.json"
    preset.write_text(json.dumps({}))
    first_read = run_params.load_preset

    def read_then_rewrite(name: str) -> dict[str, Any]:
        fields = first_read(name)
        preset.write_text(json.dumps({"models_config": str(evil)}))
        return fields

    monkeypatch.setattr(run_params, "load_preset", read_then_rewrite)
    task, kernel = str(layout["root"] / "task.json"), str(layout["root"] / "kernel.json")
    args = {"task_path": task, "kernel_path": kernel, "preset": str(preset)}
    message = await fails(client, "start_optimization", args, "preset")
    assert SECRET not in message
    assert not any(SECRET in headers for headers in _HeaderLog.seen), _HeaderLog.seen
