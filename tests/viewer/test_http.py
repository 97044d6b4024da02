"""`accelopt view` as a real subprocess, over HTTP (no browser): the URL it prints, the token
gate, the Host check, the static route, and where the token never goes (records, logs, cookies,
command lines: the browser is opened on a private redirect file)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import httpx
import pytest

from accelopt_mcp.store.sqlite import SqliteStore
from accelopt_mcp.viewer.links import record_path, run_url
from tests.viewer.conftest import ViewerProcess
from tests.viewer.synthetic import Synthetic, write_run


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, silu: tuple[Any, Any]
) -> Iterator[tuple[ViewerProcess, Synthetic, Path]]:
    path = tmp_path_factory.mktemp("viewer-http") / "kernels.db"
    with SqliteStore(path) as store:
        made = write_run(store, *silu, kernels=6, iterations=2)
    with ViewerProcess(str(path)) as process:
        yield process, made, path


def raw_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A request sent exactly as written (no client normalizes the path)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_data_request_without_the_token_in_its_header_is_refused(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    cookie = {f"accelopt_view_{viewer.port}": viewer.token}  # what an older viewer set
    for path in ("/api/runs", f"/api/run/{made.run_id}", "/api/memory", "/nowhere"):
        for given in (
            httpx.get(viewer.base + path),
            # The token anywhere but the header: as a cookie, in the query.
            httpx.get(viewer.base + path, cookies=cookie),
            httpx.get(viewer.base + path, params={"token": viewer.token}),
            httpx.get(viewer.base + path, headers={"Authorization": "Bearer nope"}),
            httpx.get(viewer.base + path, headers={"Authorization": viewer.token}),
        ):
            assert given.status_code == 401, (path, given.request.headers)
            assert made.run_id not in given.text
    assert "open the URL `accelopt view` printed" in httpx.get(f"{viewer.base}/api/runs").text


@pytest.mark.parametrize(
    "path",
    [
        "//api/runs",
        "/api/runs/",
        "/%61pi/runs",
        "/run/..%2fapi%2fruns",
        "/run/x/../../api/runs",
        "/static/../api/runs",
        "/static/..%2fapi%2fruns",
        "/runs/../api/runs",
    ],
)
def test_no_spelling_of_a_data_path_passes_as_a_page(
    served: tuple[ViewerProcess, Synthetic, Path], path: str
) -> None:
    viewer, made, _ = served
    status, body = raw_get(viewer.port, path, {"Host": f"127.0.0.1:{viewer.port}"})
    assert status in (401, 404), (path, status)
    assert made.run_id.encode() not in body


def test_the_shell_is_served_without_the_token_and_holds_no_data(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    for path in ("/", f"/run/{made.run_id}", "/memory", "/static/app.js", "/static/app.css"):
        response = httpx.get(viewer.base + path)
        assert response.status_code == 200, path
        assert made.run_id not in response.text and "set-cookie" not in response.headers
        assert "script-src 'self'" in response.headers["content-security-policy"]
    wrong = httpx.get(viewer.base + "/", params={"token": "x" * 43})
    assert wrong.status_code == 403 and "wrong token" in wrong.text


def test_the_printed_url_serves_the_page_and_its_token_opens_the_data(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    first = httpx.get(viewer.url, follow_redirects=False)
    # The page itself, which takes the token out of the address bar; no cookie.
    assert first.status_code == 200 and "/static/app.js" in first.text
    assert "set-cookie" not in first.headers
    assert viewer.token not in first.text
    with httpx.Client(
        base_url=viewer.base, headers={"Authorization": f"Bearer {viewer.token}"}
    ) as client:
        runs = client.get("/api/runs").json()
        assert [r["id"] for r in runs["runs"]] == [made.run_id]
        detail = client.get(f"/api/run/{made.run_id}")
        assert detail.status_code == 200 and detail.headers["etag"]
        again = client.get(
            f"/api/run/{made.run_id}", headers={"If-None-Match": detail.headers["etag"]}
        )
        assert again.status_code == 304
        missing = client.get("/api/run/00000000-0000-4000-8000-000000000000")
        assert missing.status_code == 404 and "no run" in missing.json()["error"]


def test_a_rebound_host_name_is_refused_even_with_the_token(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, _, _ = served
    auth = {"Authorization": f"Bearer {viewer.token}"}
    for host in ("attacker.example", f"attacker.example:{viewer.port}", "127.0.0.1:1"):
        status, body = raw_get(viewer.port, "/api/runs", {**auth, "Host": host})
        assert status == 403, host
        assert b"runs" not in body
    status, _ = raw_get(viewer.port, "/api/runs", {**auth, "Host": f"localhost:{viewer.port}"})
    assert status == 200


@pytest.mark.parametrize(
    "path",
    [
        "/static/../app.py",
        "/static/../../viewer/views/__init__.py",
        "/static/..%2fserve.py",
        "/static/%2e%2e/app.py",
        "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static//etc/passwd",
        "/static/index.html/../app.js/../../links.py",
        "/static/app.js%00.py",
    ],
)
def test_the_static_route_serves_its_own_files_only(
    served: tuple[ViewerProcess, Synthetic, Path], path: str
) -> None:
    viewer, _, _ = served
    status, body = raw_get(viewer.port, path, {"Authorization": f"Bearer {viewer.token}"})
    assert status == 404, (path, status)
    assert b"import " not in body and b"root:" not in body


def test_the_traversal_cases_aim_at_files_that_exist() -> None:
    # A case aimed at a file that has gone (views.py became a package) would pass whatever
    # the route served: each must name a real file beside or above the static folder.
    viewer_dir = Path(__file__).resolve().parents[2] / "accelopt_mcp" / "viewer"
    for target in ("app.py", "views/__init__.py", "serve.py", "links.py", "../../pyproject.toml"):
        assert (viewer_dir / target).is_file(), target


def test_the_static_route_serves_the_front_end(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, _, _ = served
    status, body = raw_get(
        viewer.port, "/static/app.js", {"Authorization": f"Bearer {viewer.token}"}
    )
    assert status == 200 and b"textContent" in body


def test_the_token_is_in_no_record_or_log_and_runs_link_to_the_viewer(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, path = served
    with SqliteStore(path) as store:
        record = record_path(store)
        assert record.exists()
        text = record.read_text()
        assert viewer.token not in text and json.loads(text)["port"] == viewer.port
        assert os.stat(record.parent).st_mode & 0o077 == 0
        assert run_url(store, made.run_id) == f"{viewer.base}/run/{made.run_id}"
        # Nothing the viewer wrote in the database carries it.
        assert viewer.token not in json.dumps(
            [r.model_dump(mode="json") for r in store.list_runs()]
        )


def test_sixteen_clients_polling_at_once_all_get_answers(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    auth = {"Authorization": f"Bearer {viewer.token}"}

    def poll(_: int) -> list[int]:
        with httpx.Client(base_url=viewer.base, headers=auth, timeout=30) as client:
            return [client.get(f"/api/run/{made.run_id}").status_code for _ in range(5)]

    with ThreadPoolExecutor(16) as pool:
        statuses = [s for found in pool.map(poll, range(16)) for s in found]
    assert statuses == [200] * 80


def test_a_stopped_viewer_is_no_longer_linked(tmp_path: Path, silu: tuple[Any, Any]) -> None:
    path = tmp_path / "kernels.db"
    with SqliteStore(path) as store:
        made = write_run(store, *silu, kernels=2, iterations=1)
        with ViewerProcess(str(path)) as viewer:
            assert run_url(store, made.run_id) == f"{viewer.base}/run/{made.run_id}"
            httpx.get(viewer.url)  # a first request, with the token in its URL
        assert run_url(store, made.run_id) is None
        assert not record_path(store).exists()
        assert "serving" in viewer.stderr_text and viewer.token not in viewer.stderr_text


def test_a_busy_port_is_refused_in_one_line(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("accelopt")),
                "view",
                "--db",
                tmp_path / "kernels.db",
                "--port",
                str(port),
                "--no-browser",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert done.returncode != 0
    assert done.stdout == ""  # no URL: nothing serves it
    (line,) = [x for x in done.stderr.splitlines() if "error" in x or "cannot" in x]
    assert f"127.0.0.1:{port}" in line and "--port 0" in line


def test_the_browser_opens_a_private_redirect_file_and_no_command_line_holds_the_token(
    tmp_path: Path,
) -> None:
    """`accelopt view` opens "the browser" $BROWSER names (here a script that records its
    command line): it is given a file:// URL of a 0600 file in a 0700 folder, the only place
    the token is written, which is gone once the viewer stops."""
    path = tmp_path / "kernels.db"
    SqliteStore(path).close()
    said = tmp_path / "browser-argv"
    browser = tmp_path / "browser.sh"
    browser.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{said}.part"\n'
        f'cat "$(echo "$1" | sed "s|^file://||")" > "{said}.page"\n'
        f'mv "{said}.part" "{said}"\n'
    )
    browser.chmod(0o700)
    with ViewerProcess(str(path), env={"BROWSER": str(browser)}, open_browser=True) as viewer:
        deadline = time.monotonic() + 30
        while not said.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert said.exists(), "accelopt view did not open the browser $BROWSER names"
        (argument,) = said.read_text().splitlines()
        assert argument.startswith("file:///") and viewer.token not in argument
        redirect = Path(unquote(urlparse(argument).path))
        assert redirect.stat().st_mode & 0o777 == 0o600
        assert redirect.parent.stat().st_mode & 0o777 == 0o700
        assert redirect.stat().st_uid == os.getuid()
        assert viewer.url in redirect.read_text()
        assert viewer.url in Path(f"{said}.page").read_text()  # what the browser read
        # No command line on this machine holds the token while the viewer serves.
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                held = cmdline.read_bytes()
            except OSError:  # a process that ended meanwhile, or not ours to read
                continue
            assert viewer.token.encode() not in held, cmdline
    assert not redirect.exists() and not redirect.parent.exists()
    assert viewer.token not in viewer.stderr_text
