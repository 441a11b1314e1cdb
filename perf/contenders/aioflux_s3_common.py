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
    """aioflux's S3 store on the emulator's S3 face (path style, dummy credentials).

    ``sign_payload=False``: bodies go ``UNSIGNED-PAYLOAD``, as aioflux sends
    them to S3 over https and as s3torchconnector always does; over the
    emulator's plain http the default would hash every body for the
    signature (~0.8 s of CPU per GiB here).
    """
    return aioflux.S3Store(config, endpoint=manifest.s3, region=REGION, sign_payload=False)
