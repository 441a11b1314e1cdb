"""What the aioflux S3 contenders share: the store they read and write through.

Not a contender itself.
"""

from __future__ import annotations

from _contender import Manifest

import aioflux
from aioflux import ClientConfig

__all__ = ["REGION", "s3_store"]

REGION = "us-east-1"


def s3_store(manifest: Manifest, config: ClientConfig | None = None) -> aioflux.ObjectStore:
    """aioflux's S3 store on the emulator's S3 face (path style, dummy credentials)."""
    return aioflux.S3Store(config, endpoint=manifest.s3, region=REGION)
