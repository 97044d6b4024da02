"""torch.cuda of the stand-in: one device, unless STANDIN_TORCH_NO_CUDA=1."""

from __future__ import annotations

import os

DEVICE_NAME = "NVIDIA H100 80GB HBM3"


def is_available() -> bool:
    return os.environ.get("STANDIN_TORCH_NO_CUDA") != "1"


def device_count() -> int:
    return 1 if is_available() else 0


def get_device_name(index: int = 0) -> str:
    return DEVICE_NAME


def synchronize() -> None:
    return None
