"""Where a tool may read: every path an MCP client names (task, kernel, import folder, config
file) is resolved (symlinks followed, `..` collapsed) and must then lie under one of the
server's roots. The client is not trusted (a prompt-injected agent, or any local process on an
HTTP server): without this a tool reads any file the server can, and a kernel .py comes back
word for word through get_solution.

Roots: `--root PATH` on accelopt-mcp, else $ACCELOPT_MCP_ROOTS (os.pathsep-separated), else
the server's working directory (not when it is /) and ACCELOPT_HOME."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOTS_ENV = "ACCELOPT_MCP_ROOTS"
# A task, kernel or config file is a few kB; anything this large is not one, and reading it
# would only tie up the server.
MAX_FILE_BYTES = 16 * 1024 * 1024
# A folder to import is walked before it is read; a tree larger than this is not a benchmark.
MAX_TREE_ENTRIES = 100_000
# What a kernel_path may name: a kernel .py or a solution .json.
KERNEL_SUFFIXES = (".py", ".json")


class PathRefused(ValueError):
    """A path argument outside the roots, or not a readable regular file/folder. The message
    names the argument and never the file's contents."""


def accelopt_home() -> Path:
    return Path(os.environ.get("ACCELOPT_HOME") or Path.home() / ".accelopt").expanduser()


@dataclass(frozen=True)
class Roots:
    paths: tuple[Path, ...]

    @classmethod
    def of(cls, paths: Iterable[str | Path]) -> Roots:
        resolved: list[Path] = []
        for p in paths:
            if str(p).strip():
                # A root that does not exist yet (ACCELOPT_HOME before first use) still counts.
                path = Path(p).expanduser().resolve(strict=False)
                if path not in resolved:
                    resolved.append(path)
        return cls(tuple(resolved))

    @classmethod
    def configured(cls, given: Sequence[str | Path] | None = None) -> Roots:
        """`given` (the --root options), else $ACCELOPT_MCP_ROOTS, else cwd (unless it is the
        filesystem root) + ACCELOPT_HOME."""
        if given:
            return cls.of(given)
        env = os.environ.get(ROOTS_ENV, "")
        if env.strip():
            return cls.of(env.split(os.pathsep))
        # A server started from / (a service, a container) has no project there: taking the
        # working directory would open every file the user can read. --root / still can.
        cwd = Path.cwd()
        return cls.of([cwd, accelopt_home()] if cwd != Path(cwd.anchor) else [accelopt_home()])

    def describe(self) -> str:
        return ", ".join(str(p) for p in self.paths) or "(none)"

    def contains(self, path: Path) -> bool:
        return any(path == root or path.is_relative_to(root) for root in self.paths)

    def _refuse(self, arg: str, why: str) -> PathRefused:
        return PathRefused(
            f"{arg}: {why}; the server reads only under its roots ({self.describe()}): put the "
            f"file there, or restart accelopt-mcp with --root DIR (or {ROOTS_ENV}) to add one"
        )

    def resolve(self, value: str | Path, arg: str, *, what: str = "file or directory") -> Path:
        """The path, resolved, if it exists and lies under a root; else PathRefused. Whether a
        path outside the roots exists is not told (checked before existence)."""
        given = Path(value).expanduser()
        try:
            if not self.contains(given.resolve(strict=False)):
                raise self._refuse(arg, f"{str(value)!r} is outside the server's roots")
            path = given.resolve(strict=True)
        except (OSError, RuntimeError):
            raise PathRefused(
                f"{arg}: {str(value)!r} is not a {what} (it does not exist)"
            ) from None
        if not self.contains(path):  # a link swapped in between the two resolutions
            raise self._refuse(arg, f"{str(value)!r} is outside the server's roots")
        return path

    def file(self, value: str | Path, arg: str, *, suffixes: Sequence[str] = ()) -> Path:
        """A regular file under a root, of one of `suffixes` (when given), opened once without
        following links and without blocking (a FIFO or device would hang a read) to check."""
        path = self.resolve(value, arg)
        if suffixes and path.suffix not in suffixes:
            raise PathRefused(f"{arg}: {str(value)!r} must be a {' or '.join(suffixes)} file")
        self._check_regular(path, arg, value)
        return path

    def file_or_dir(self, value: str | Path, arg: str, *, suffixes: Sequence[str] = ()) -> Path:
        """A task path: a file as `file`, or a folder whose every entry passes `tree`."""
        path = self.resolve(value, arg)
        if path.is_dir():
            return self.tree(path, arg)
        return self.file(path, arg, suffixes=suffixes)

    def tree(self, value: str | Path, arg: str) -> Path:
        """A folder under a root whose every entry is a folder or a regular file of sane size,
        and whose links all land under a root: the loaders read whatever sits inside."""
        path = self.resolve(value, arg, what="directory")
        if not path.is_dir():
            raise PathRefused(f"{arg}: {str(value)!r} is not a directory")
        seen = 0
        for top, dirs, files in os.walk(path, followlinks=False):
            for name in [*dirs, *files]:
                seen += 1
                if seen > MAX_TREE_ENTRIES:
                    raise PathRefused(
                        f"{arg}: {str(value)!r} holds over {MAX_TREE_ENTRIES} entries; give a "
                        "smaller folder"
                    )
                entry = Path(top) / name
                shown = str(entry.relative_to(path))
                if entry.is_symlink():
                    target = self.resolve(entry, f"{arg} (entry {shown!r})")
                    if target.is_dir():
                        # os.walk does not descend into it; check it separately.
                        self.tree(target, f"{arg} (entry {shown!r})")
                    else:
                        self._check_regular(target, f"{arg} (entry {shown!r})", shown)
                elif name in files:
                    self._check_regular(entry, f"{arg} (entry {shown!r})", shown)
        return path

    @staticmethod
    def _check_regular(path: Path, arg: str, shown: str | Path) -> None:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise PathRefused(
                f"{arg}: {str(shown)!r} cannot be opened ({exc.strerror}); it must be a "
                "readable regular file, not a link swapped in or a device"
            ) from None
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PathRefused(f"{arg}: {str(shown)!r} is not a regular file (a FIFO or device?)")
        if info.st_size > MAX_FILE_BYTES:
            raise PathRefused(
                f"{arg}: {str(shown)!r} is {info.st_size} bytes, over the "
                f"{MAX_FILE_BYTES // (1024 * 1024)} MiB a task, kernel or config file may be"
            )
