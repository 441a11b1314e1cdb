"""What the multi-storage-client contenders share: an MSC profile on the emulator.

Not a contender itself; imported as a sibling by ``ckpt_*_msc.py`` under the
``msc`` venv. The profile is MSC's own GCS provider (``type: gcs``) with its
documented options: ``endpoint_url`` set to the emulator, ``skip_signature``
for anonymous access, ``project_id``. With a custom ``endpoint_url`` MSC
itself turns off its Rust client (it logs "Rust client for GCS does not
support customized endpoint URL") and uses its Python provider over
google-cloud-storage, at its default multipart threshold and chunk size, and
at its default concurrency (8 threads) unless ``max_concurrency`` is given:
MSC's one concurrency option, read by that provider. Nothing is patched.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

__all__ = ["configure"]


def configure(endpoint: str, bucket: str, profile: str = "perf",
              max_concurrency: int | None = None) -> str:
    """Write an MSC config for ``bucket`` on ``endpoint``; point MSC_CONFIG at it.

    Args:
        max_concurrency: the provider's threads per transfer (None: MSC's default).

    Returns:
        The ``msc://PROFILE/`` URL prefix of the bucket's root.
    """
    config: dict[str, Any] = {
        "profiles": {
            profile: {
                "storage_provider": {
                    "type": "gcs",
                    "options": {
                        "base_path": bucket,
                        "project_id": "perf",
                        "endpoint_url": endpoint,
                        "skip_signature": True,
                    },
                },
            },
        },
    }
    if max_concurrency is not None:
        options = config["profiles"][profile]["storage_provider"]["options"]
        options["max_concurrency"] = max_concurrency
    fd, path = tempfile.mkstemp(prefix="msc-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(config, fh)
    os.environ["MSC_CONFIG"] = path
    return f"msc://{profile}/"
