"""The pure builder of bubblewrap's command line and the jail's environment (jail_argv), checked
on its own output: no bwrap, no namespaces, nothing started but one /bin/sh for the launch
trampoline."""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.isolation import jail_argv
from accelopt_mcp.isolation.jail_argv import (
    JAIL_GID,
    JAIL_UID,
    Bwrap,
    HostLayout,
    args_file_contents,
    bwrap_args,
    jail_environment,
    launch_command,
    translate_paths,
    work_as_tmpfs,
)
from accelopt_mcp.isolation.sandbox import THREAD_VARS

WORK = "/srv/jobs/work-1"
ARGV = ["/opt/venv/bin/python", "-I", "-c", "print('a b')", "it's"]
USER = Bwrap("/usr/bin/bwrap", (0, 8, 0), as_root=False, setpriv=None)
ROOT = Bwrap("/usr/bin/bwrap", (0, 8, 0), as_root=True, setpriv="/usr/bin/setpriv")
HOST = HostLayout(
    python_prefixes=("/opt/venv", "/opt/python3.11"),
    root_entries=(("/bin", "usr/bin"), ("/lib64", None)),
)


def build(bwrap: Bwrap = USER, **kw: Any) -> list[str]:
    kw.setdefault("argv", ARGV)
    kw.setdefault("work_dir", WORK)
    kw.setdefault("mounts", [(WORK, WORK, True)])
    kw.setdefault("env", {"TMPDIR": WORK})
    kw.setdefault("tmpfs_bytes", 1 << 20)
    kw.setdefault("info_fd", None)
    kw.setdefault("host", HOST)
    return bwrap_args(bwrap, **kw)


def split(args: list[str]) -> tuple[list[str], list[str]]:
    """(bwrap's options, the command it runs)."""
    at = args.index("--")
    return args[:at], args[at + 1 :]


def triples(options: list[str], flag: str) -> list[tuple[str, str]]:
    """The (a, b) of every `flag a b` among the options."""
    return [(options[i + 1], options[i + 2]) for i, o in enumerate(options) if o == flag]


def has_run(items: list[str], run: list[str]) -> bool:
    return any(items[i : i + len(run)] == run for i in range(len(items) - len(run) + 1))


# -- who the program runs as, and in which namespaces


def test_without_root_a_user_namespace_maps_the_jail_onto_nobody() -> None:
    options, command = split(build(USER))
    assert {"--unshare-all", "--unshare-user", "--disable-userns"} <= set(options)
    assert has_run(options, ["--uid", str(JAIL_UID)])
    assert has_run(options, ["--gid", str(JAIL_GID)])
    assert has_run(options, ["--chdir", WORK])
    assert "--cap-add" not in options and has_run(options, ["--cap-drop", "ALL"])
    # The program itself, nothing in front of it.
    assert command == ARGV


def test_nested_user_namespaces_are_disabled_only_where_bwrap_can() -> None:
    old = Bwrap("/usr/bin/bwrap", (0, 7, 9), as_root=False, setpriv=None)
    assert "--disable-userns" not in split(build(old))[0]
    assert "--disable-userns" in split(build(USER))[0]


def test_as_root_no_user_namespace_and_setpriv_drops_to_nobody_before_the_program() -> None:
    options, command = split(build(ROOT))
    want = {"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"}
    assert want | {"--unshare-cgroup-try"} <= set(options)
    # A user namespace would map the jail's uid onto host root.
    assert not {"--unshare-all", "--unshare-user", "--uid", "--gid", "--chdir"} & set(options)
    # Every capability dropped but the three setpriv needs, which it drops in turn.
    caps = options[options.index("--cap-drop") :]
    assert caps == ["--cap-drop", "ALL"] + [
        x for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP") for x in ("--cap-add", cap)
    ]
    assert command == [
        "/usr/bin/setpriv",
        f"--reuid={JAIL_UID}",
        f"--regid={JAIL_GID}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        "/usr/bin/env",
        f"--chdir={WORK}",
        "--",
        *ARGV,
    ]


def test_the_jail_dies_with_its_parent_in_a_session_of_its_own() -> None:
    for bwrap in (USER, ROOT):
        options = split(build(bwrap))[0]
        assert {"--die-with-parent", "--new-session"} <= set(options)
        assert has_run(options, ["--hostname", "jail"])


def test_the_info_fd_is_passed_only_when_given() -> None:
    assert "--info-fd" not in build()
    assert has_run(split(build(info_fd=17))[0], ["--info-fd", "17"])


# -- the environment


def test_the_environment_is_cleared_then_set_from_env_alone() -> None:
    env = {"TMPDIR": WORK, "A": "1 2", "B": ""}
    options = split(build(env=env))[0]
    first_set = options.index("--setenv")
    assert "--clearenv" in options[:first_set]
    assert dict(triples(options, "--setenv")) == env
    assert len(triples(options, "--setenv")) == len(env)


def test_jail_environment_takes_nothing_from_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELOPT_CANARY", "host-only")
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setenv("PATH", "/home/alice/bin:/usr/bin")
    env = jail_environment(WORK, None, None)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "TMPDIR": WORK,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",
    }


def test_jail_environment_adds_thread_counts_and_extras_but_no_secrets() -> None:
    extra = {"MY_API_KEY": "k", "db_password": "p", "FLAVOUR": "x", "LANG": "C"}
    env = jail_environment(WORK, extra, {2, 5, 7})
    assert all(env[name] == "3" for name in THREAD_VARS)
    assert env["FLAVOUR"] == "x" and env["LANG"] == "C"  # the caller's extras come last
    assert "MY_API_KEY" not in env and "db_password" not in env
    assert not set(THREAD_VARS) & set(jail_environment(WORK, None, set()))


# -- what is mounted, and how


def test_mounts_are_bound_read_only_or_writable_as_asked() -> None:
    mounts = [
        (WORK, WORK, True),
        ("/home/alice/data", "/data", False),
        ("/home/alice/out", "/out", True),
    ]
    options = split(build(mounts=mounts))[0]
    ro, rw = triples(options, "--ro-bind"), triples(options, "--bind")
    assert ("/home/alice/data", "/data") in ro and ("/home/alice/data", "/data") not in rw
    assert {(WORK, WORK), ("/home/alice/out", "/out")} == set(rw)


def test_usr_the_root_links_and_the_python_prefixes_are_read_only() -> None:
    options = split(build())[0]
    ro = triples(options, "--ro-bind")
    assert ("/usr", "/usr") in ro and ("/lib64", "/lib64") in ro
    assert ("usr/bin", "/bin") in triples(options, "--symlink")
    assert {("/opt/venv", "/opt/venv"), ("/opt/python3.11", "/opt/python3.11")} <= set(ro)


def test_only_the_given_host_layout_is_shown() -> None:
    bare = HostLayout(python_prefixes=(), root_entries=())
    options = split(build(host=bare))[0]
    # /usr and the work dir only, whatever this machine's / holds.
    assert triples(options, "--ro-bind") == [("/usr", "/usr")]
    assert triples(options, "--bind") == [(WORK, WORK)]
    assert "--symlink" not in options


def test_proc_dev_and_size_capped_tmpfs() -> None:
    options = split(build(tmpfs_bytes=12345))[0]
    assert has_run(options, ["--proc", "/proc", "--dev", "/dev"])
    for where in ("/tmp", "/dev/shm"):
        assert has_run(options, ["--perms", "1777", "--size", "12345", "--tmpfs", where])
    old = Bwrap("/usr/bin/bwrap", (0, 6, 2), as_root=False, setpriv=None)
    assert "--size" not in split(build(old, tmpfs_bytes=12345))[0]


def test_parents_are_bound_before_children_and_missing_parents_made_0755() -> None:
    mounts = [
        ("/h/inner", "/opt/a/b/c", False),  # given first, bound last
        ("/h/outer", "/opt/a", True),
        ("/h/shm", "/dev/shm/x", True),
        (WORK, WORK, True),
    ]
    options = split(build(mounts=mounts, host=HostLayout((), ())))[0]
    binds = [options[i + 2] for i, o in enumerate(options) if o in ("--bind", "--ro-bind")]
    assert binds.index("/opt/a") < binds.index("/opt/a/b/c")
    made = [options[i + 1] for i, o in enumerate(options) if o == "--dir"]
    # /opt/a/b lies inside the /opt/a bind; /dev/shm is bwrap's own; /srv and /srv/jobs are not.
    assert made == ["/opt", "/srv", "/srv/jobs"]
    for name, needed_by in (("/opt", "/opt/a"), ("/srv", WORK), ("/srv/jobs", WORK)):
        at = options.index(name)
        assert options[at - 3 : at] == ["--perms", "0755", "--dir"]
        assert at < next(
            i for i, o in enumerate(options) if o.endswith("bind") and options[i + 2] == needed_by
        )


def test_the_standard_directories_are_never_made_again() -> None:
    # /tmp is a tmpfs of bwrap's own, and /lib64 counts as there even where this host's layout
    # has none: only what lies below them is made.
    mounts = [(WORK, "/tmp/w", True), ("/h/l", "/lib64/extra/x", False)]
    options = split(build(mounts=mounts, host=HostLayout((), ())))[0]
    assert [options[i + 1] for i, o in enumerate(options) if o == "--dir"] == ["/lib64/extra"]


# -- the work dir as a tmpfs


def test_work_as_tmpfs_turns_only_the_work_dirs_bind_into_a_tmpfs() -> None:
    args = build(mounts=[(WORK, WORK, True), ("/home/alice/out", "/out", True)])
    at = next(i for i in range(len(args)) if args[i : i + 3] == ["--bind", WORK, WORK])
    out = work_as_tmpfs(args, WORK, 5 << 20)
    tmpfs = ["--perms", "1777", "--size", str(5 << 20), "--tmpfs", WORK]
    assert out == [*args[:at], *tmpfs, *args[at + 3 :]]
    assert triples(split(out)[0], "--bind") == [("/home/alice/out", "/out")]


def test_work_as_tmpfs_refuses_a_work_dir_that_is_not_bound_writable() -> None:
    args = build(mounts=[(WORK, WORK, False)])
    with pytest.raises(RuntimeError, match="not among bwrap's binds"):
        work_as_tmpfs(args, WORK, 1 << 20)


# -- the launch: nothing of the host on pid 1's command line


def test_pid_1s_command_line_holds_no_host_path() -> None:
    args = build(mounts=[(WORK, WORK, True), ("/home/alice/data", "/data", False)])
    command = launch_command(USER, args_fd=5)
    assert command == [
        "/usr/bin/bwrap",
        "--args",
        "5",
        "--",
        "/bin/sh",
        "-c",
        'eval "$ACCELOPT_JAIL_EXEC"',
    ]
    # The host paths travel in the args file (a memfd), never on bwrap's argv.
    data = os.fsdecode(args_file_contents(args, seccomp_fd=4))
    for secret in (WORK, "/home/alice/data", "/opt/venv", "/opt/python3.11"):
        assert secret in data
        assert not any(secret in item for item in command)


def test_the_args_file_holds_the_options_and_the_command_as_one_variable() -> None:
    args = build()
    options, command = split(args)
    data = args_file_contents(args, seccomp_fd=9)
    assert data.endswith(b"\0")
    listed = [os.fsdecode(a) for a in data[:-1].split(b"\0")]
    assert listed[:2] == ["--seccomp", "9"]
    assert listed[2:-3] == options
    assert listed[-3:-1] == ["--setenv", "ACCELOPT_JAIL_EXEC"]
    script = listed[-1]
    assert script == f"unset ACCELOPT_JAIL_EXEC; exec {shlex.join(command)}"
    assert shlex.split(script.split("; exec ", 1)[1]) == command


def test_the_builder_reads_nothing_of_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> object:
        raise AssertionError("the pure builder looked at the host")

    # Undone as the block is left, before pytest reports anything.
    with monkeypatch.context() as m:
        for name in ("islink", "isdir", "exists", "lexists", "realpath", "abspath"):
            m.setattr(os.path, name, refuse)
        for name in ("readlink", "stat", "lstat", "listdir", "scandir", "getcwd", "geteuid"):
            m.setattr(os, name, refuse)
        m.setattr(os, "environ", {})
        env = jail_environment(WORK, {"A": "1"}, {0})
        built = []
        for bwrap in (USER, ROOT):
            args = work_as_tmpfs(build(bwrap, env=env, info_fd=3), WORK, 1 << 20)
            built.append((args_file_contents(args, seccomp_fd=4), launch_command(bwrap, args_fd=5)))
        translated = translate_paths(["/data/x"], [("/h", "/data")])
    assert env["A"] == "1" and len(built) == 2 and translated == ["/h/x"]


def test_the_trampoline_runs_exactly_the_command_and_unsets_its_variable() -> None:
    """The shell bwrap starts evals the variable's line: the program gets its argv back
    word for word, and never sees the variable."""
    code = (
        "import os, sys, json\n"
        "print(json.dumps([sys.argv[1:], 'ACCELOPT_JAIL_EXEC' in os.environ]))"
    )
    argv = [sys.executable, "-c", code, "a b", "it's", "$HOME", ""]
    args = ["--clearenv", "--", *argv]
    listed = args_file_contents(args, seccomp_fd=3)[:-1].split(b"\0")
    name, script = os.fsdecode(listed[-2]), os.fsdecode(listed[-1])
    command = launch_command(Bwrap("/usr/bin/bwrap", (0, 8), False, None), args_fd=3)
    shell = command[command.index("--") + 1 :]
    done = subprocess.run(
        shell, env={name: script, "HOME": "/h"}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[["a b", "it\'s", "$HOME", ""], false]'


# -- kind "none": jail paths in an argv become host paths


def test_translate_paths_maps_jail_paths_and_paths_under_them() -> None:
    pairs = [("/host/lib", "/jail/lib"), ("/host/root", "/jail")]
    argv = ["/jail/lib", "/jail/lib/x.py", "/jail/library", "/jail", "/jail/z", "-c", "/other"]
    assert translate_paths(argv, pairs) == [
        "/host/lib",
        "/host/lib/x.py",
        "/host/root/library",  # not under /jail/lib, but under /jail
        "/host/root",
        "/host/root/z",
        "-c",
        "/other",
    ]


def test_translate_paths_takes_the_first_pair_that_matches() -> None:
    assert translate_paths(["/j/a/b"], [("/h1", "/j"), ("/h2", "/j/a")]) == ["/h1/a/b"]
    assert translate_paths(["/j/a/b"], [("/h2", "/j/a"), ("/h1", "/j")]) == ["/h2/b"]


def test_the_builder_imports_nothing_of_the_jail_above_it() -> None:
    """jail_argv sits below the probe and the spawner (they import it): of the project it
    imports the sandbox's names only."""
    tree = ast.parse(Path(jail_argv.__file__).read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("accelopt_mcp")
    }
    assert imported == {"accelopt_mcp.isolation.sandbox"}
