"""What the s3torchconnector contenders share: how they reach the emulator.

Not a contender itself; imported as a sibling under the ``s3tc`` venv.
s3torchconnector 1.5 reaches the emulator's S3 face over plain
``http://127.0.0.1:PORT`` through its own documented settings: ``endpoint=``,
``region="us-east-1"`` and ``S3ClientConfig(force_path_style=True)``; the
harness puts dummy credentials in ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (its CRT client signs, the emulator does not
check). Nothing is patched.
"""

from __future__ import annotations

from typing import Any

from s3torchconnector import S3ClientConfig

__all__ = ["REGION", "client_config", "read_all"]

REGION = "us-east-1"


def client_config() -> S3ClientConfig:
    """Path-style addressing (the emulator serves no virtual hosts), defaults otherwise."""
    return S3ClientConfig(force_path_style=True)


def read_all(reader: Any) -> int:
    """A dataset transform: read the object's bytes, hand back their length.

    Module level (not a lambda) so DataLoader workers can pickle it.
    """
    return len(reader.read())
