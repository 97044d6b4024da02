"""The run-setting parameters of the start_optimization tool, one per entry of RUN_SETTINGS,
each optional (null or left out: the preset's value), with the field's bounds and choices in
the tool's schema."""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import Field

from accelopt_mcp.engine.presets import PRESETS, load_preset
from accelopt_mcp.engine.setting_signature import with_setting_params
from accelopt_mcp.engine.settings import RunSetting
from accelopt_mcp.llm.config import LlmConfigError, load_role_configs
from accelopt_mcp.llm.key_destinations import require_trusted_destinations
from accelopt_mcp.mcp_tools.roots import Roots, accelopt_home

SNAPSHOT_FOLDER = "model-configs"
"""Under ACCELOPT_HOME: the copies of client-named model configs that runs read (see
confined_run_files)."""

R = TypeVar("R")


def setting_param(setting: RunSetting) -> inspect.Parameter:
    """The tool parameter of one setting: `<type> | None = None`, None meaning not given."""
    field = Field(description=setting.describe(), **setting.bounds())
    annotation = Annotated[setting.value_type() | None, field]  # type: ignore[valid-type]
    return inspect.Parameter(
        setting.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def with_run_params(before: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorator: the tool takes `given` (the settings given, by field) and publishes one
    parameter per run setting, listed before its parameter `before`."""
    return with_setting_params(setting_param, before=before)


def confined_run_files(
    roots: Roots, preset: str, models_config: str | None
) -> tuple[str, str | None]:
    """The preset and the model config a run's settings will load, each file confined to the
    roots (roots.py): a preset file, and the model config given or, when none is, the one the
    preset names (resolving the settings loads it, so it is checked before). A preset or
    model config given by name (a shipped one) stays as it is.

    A model config file is the client's choice of endpoints and of the variables whose values
    are sent there as keys: it must send none of this server's keys anywhere its operator does
    not (llm/key_destinations.py). What the run then reads is a copy taken here, the bytes that
    were checked, so that the file rewritten after the check cannot send them elsewhere."""
    if preset not in PRESETS:
        preset = str(roots.file(preset, "preset", suffixes=(".json",)))
    if models_config is None:
        named = load_preset(preset).get("models_config")
        models_config = named if isinstance(named, str) else None
    if models_config is not None and _names_a_file(models_config):
        models_config = str(_checked_copy(roots.file(models_config, "models_config")))
    return preset, models_config


def require_config_checked(preset: str, checked: str | None, resolved: str | None) -> None:
    """Raise LlmConfigError when the run's settings (`resolved`, read from the preset again)
    name a model config where confined_run_files found none to check (`checked`): a preset
    file rewritten between the two reads would otherwise have its new config taken unchecked."""
    if checked is None and resolved is not None:
        raise LlmConfigError(
            f"preset {preset} named no model config when it was checked and names one now: it "
            "changed while it was read; start again once it stays as it is"
        )


def _checked_copy(path: Path) -> Path:
    """A copy of the model config at `path` in this server's own folder, checked for where it
    sends keys (KeyDestinationRefused, an LlmConfigError, names `path`)."""
    data = path.read_bytes()
    folder = accelopt_home() / SNAPSHOT_FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.is_symlink():
        # A link there (planted by whoever writes under a root: ACCELOPT_HOME is one by
        # default) would put every copy where its planter rewrites it after the check.
        raise LlmConfigError(
            f"{folder} is a link, not this server's own folder of model config copies; "
            "remove it and start again (the server makes the folder anew)"
        )
    copy = folder / f"{hashlib.sha256(data).hexdigest()[:32]}{path.suffix}"
    # Written afresh every time, never taken as found: what sits at that predictable name may
    # be a link to a file whose bytes match now and change after the check. mkstemp creates a
    # new file (O_EXCL), and os.replace puts it in place of whatever is there, a link included.
    descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{copy.name}.")
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
    os.replace(partial, copy)
    try:
        require_trusted_destinations(load_role_configs(copy), f"model config {path}")
    except LlmConfigError as exc:
        # A message about the copy names the file the client gave.
        raise type(exc)(str(exc).replace(str(copy), str(path))) from None
    return copy


def _names_a_file(value: str) -> bool:
    """A models_config that is a path, not a preset name (which has no separator or dot)."""
    return os.sep in value or "." in value or value.startswith("~")
