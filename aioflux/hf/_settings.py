"""Where the Hub is and who asks it: the settings ``huggingface_hub`` reads.

- the endpoint: ``HF_ENDPOINT``, else ``https://huggingface.co``;
- the token: ``HF_TOKEN``, else ``huggingface_hub.get_token()`` where that
  package is installed (its token file from ``hf auth login``, and the
  other places it looks), else none;
- offline: ``HF_HUB_OFFLINE`` set to ``1``, ``true``, ``yes`` or ``on``.

Read when a store is made, never at import.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_ENDPOINT", "TOKEN_HINT", "endpoint", "offline", "token"]

DEFAULT_ENDPOINT = "https://huggingface.co"
#: What a refusal says to do.
TOKEN_HINT = ("a gated or private repo needs a Hugging Face token with access to it: set "
              "HF_TOKEN (or log in with `hf auth login`), and accept the repo's terms on "
              "the Hub if it is gated")
_TRUE = ("1", "true", "yes", "on")


def endpoint() -> str:
    """The Hub's root URL (``HF_ENDPOINT``), without a trailing ``/``."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no requests to the Hub."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def token() -> str | None:
    """The token to send the Hub, or None (see the module doc)."""
    value = os.environ.get("HF_TOKEN", "").strip()
    if value:
        return value
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    found = get_token()
    return found.strip() or None if isinstance(found, str) else None
