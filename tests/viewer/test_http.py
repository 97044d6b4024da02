"""`accelopt view` as a real subprocess, over HTTP (no browser): the URL it prints, the token
gate, the Host check, the static route, and where the token never goes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


def test_a_request_without_the_token_is_refused(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    for path in (
        "/",
        f"/run/{made.run_id}",
        "/api/runs",
        f"/api/run/{made.run_id}",
        "/static/app.js",
    ):
        response = httpx.get(viewer.base + path)
        assert response.status_code == 401, path
        assert made.run_id not in response.text
    wrong = httpx.get(f"{viewer.base}/api/runs", params={"token": "x" * 43})
    assert wrong.status_code == 403
    bad_cookie = httpx.get(
        f"{viewer.base}/api/runs", cookies={f"accelopt_view_{viewer.port}": "nope"}
    )
    assert bad_cookie.status_code == 401
    bad_bearer = httpx.get(f"{viewer.base}/api/runs", headers={"Authorization": "Bearer nope"})
    assert bad_bearer.status_code == 401


def test_the_printed_url_sets_a_cookie_and_leaves_the_address_bar(
    served: tuple[ViewerProcess, Synthetic, Path],
) -> None:
    viewer, made, _ = served
    first = httpx.get(viewer.url, follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/"  # the token is not carried on
    cookie = first.cookies.get(f"accelopt_view_{viewer.port}")
    assert cookie == viewer.token
    assert "httponly" in first.headers["set-cookie"].lower()
    with httpx.Client(
        base_url=viewer.base, cookies={f"accelopt_view_{viewer.port}": cookie}
    ) as client:
        page = client.get("/")
        assert page.status_code == 200 and "/static/app.js" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
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
    bearer = httpx.get(
        f"{viewer.base}/api/runs", headers={"Authorization": f"Bearer {viewer.token}"}
    )
    assert bearer.status_code == 200


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
        "/static/../views.py",
        "/static/../../viewer/views.py",
        "/static/..%2fviews.py",
        "/static/%2e%2e/app.py",
        "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static//etc/passwd",
        "/static/index.html/../app.js/../../views.py",
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
    cookies = {f"accelopt_view_{viewer.port}": viewer.token}

    def poll(_: int) -> list[int]:
        with httpx.Client(base_url=viewer.base, cookies=cookies, timeout=30) as client:
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
