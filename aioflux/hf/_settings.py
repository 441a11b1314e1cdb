"""Where the Hub is and who asks it: the settings ``huggingface_hub`` reads.

- the endpoint: the store's argument, else ``HF_ENDPOINT``, else
  ``https://huggingface.co``, checked as every store's ``endpoint=`` is;
- the token: ``HF_TOKEN``, else ``huggingface_hub.get_token()`` where that
  package is installed (its token file from ``hf auth login``, and the
  other places it looks), else none;
- offline: ``HF_HUB_OFFLINE`` set to ``1``, ``true``, ``yes`` or ``on``.

Read when a store is made, never at import.
"""

from __future__ import annotations

import os

from .._core.checks.arguments import endpoint_url

__all__ = ["DEFAULT_ENDPOINT", "TOKEN_HINT", "endpoint", "offline", "token"]

DEFAULT_ENDPOINT = "https://huggingface.co"
#: What a refusal says to do.
TOKEN_HINT = ("a gated or private repo needs a Hugging Face token with access to it: set "
              "HF_TOKEN (or log in with `hf auth login`), and accept the repo's terms on "
              "the Hub if it is gated")
_TRUE = ("1", "true", "yes", "on")


def endpoint(given: str | None = None) -> str:
    """The Hub's root URL, without a trailing ``/``.

    Args:
        given: the store's ``endpoint=`` (None or ``""``: ``HF_ENDPOINT``,
            else the default).

    Returns:
        The URL (``host:port`` means ``http://host:port``).

    Raises:
        InvalidURL: not an http(s) API root (a ``user:password@``, a query,
            a bad scheme or port), naming ``HF_ENDPOINT`` where it came
            from there.
    """
    if given:
        url = endpoint_url("HfStore", given)
    else:
        url = endpoint_url("HfStore (HF_ENDPOINT)", os.environ.get("HF_ENDPOINT") or None)
    return url or DEFAULT_ENDPOINT


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
