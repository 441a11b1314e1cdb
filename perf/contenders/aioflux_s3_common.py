"""What the aioflux S3 contenders share: the store they read and write through.

PROVISIONAL: written while the S3 backend was being written on another
branch (s3core), against its ``new_store("s3", config, endpoint=...,
region=...)`` (in ``aioflux._api.stores``; not exported from ``aioflux``
there) and ``MapDataset.from_prefix("s3://...", endpoint=...)``. Checked
against that branch's code with this emulator; check again after the
merge. Not a contender itself.
"""

from __future__ import annotations

from _contender import Manifest

import aioflux
from aioflux import ClientConfig
from aioflux._api.stores import new_store

__all__ = ["REGION", "s3_store"]

REGION = "us-east-1"


def s3_store(manifest: Manifest, config: ClientConfig | None = None) -> aioflux.ObjectStore:
    """aioflux's S3 store on the emulator's S3 face (path style, dummy credentials)."""
    return new_store("s3", config, endpoint=manifest.s3, region=REGION)
