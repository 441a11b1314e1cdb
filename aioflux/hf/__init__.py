"""Read-only ``hf://`` URLs: models, datasets and spaces on the Hugging
Face Hub, each read at one commit.

The endpoint is ``$HF_ENDPOINT`` (default ``https://huggingface.co``), the
token ``$HF_TOKEN`` or ``huggingface_hub``'s own where it is installed;
``HF_HUB_OFFLINE=1`` sends no request and reads what ``huggingface_hub``'s
cache holds.
"""

from ._store import HfStore

__all__ = ["HfStore"]
