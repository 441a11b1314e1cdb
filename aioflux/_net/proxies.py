"""The proxy requests to an endpoint go through, from the environment.

``HTTPS_PROXY`` (or ``ALL_PROXY``) and ``NO_PROXY``, as curl and requests
read them (urllib's parser: ``NO_PROXY`` holds host names, domain suffixes,
``host:port`` or ``*``), read when a client is made. Only an ``https://``
endpoint goes through a proxy, by a CONNECT tunnel: the proxy relays TLS it
cannot read, so it never sees a token, a signature or a byte of data. A
plain ``http://`` endpoint (an emulator, a lab MinIO) is always reached
directly, whatever ``HTTP_PROXY`` says: a proxy would read its requests,
``Authorization`` headers included. aiohttp's own ``trust_env`` is not used:
it proxies plain http too and also reads ``~/.netrc``, whose credentials
collide with the ``Authorization`` header aioflux sends.
"""

from __future__ import annotations

import os
import urllib.request
from urllib.parse import urlsplit

from .._core.errors import InvalidArgument

__all__ = ["proxy_for", "proxy_note"]

_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
              "all_proxy")


def proxy_for(endpoint: str) -> str | None:
    """The proxy URL requests to ``endpoint`` go through, or None (direct).

    Args:
        endpoint: the store's API root (``https://storage.googleapis.com``).

    Returns:
        ``http://[user:password@]host:port`` of the proxy, or None.

    Raises:
        InvalidArgument: the proxy variable names a proxy aioflux cannot
            speak to (socks, or not a URL).
    """
    parts = urlsplit(endpoint)
    if parts.scheme != "https" or not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()  # keys: "https", "all", "no"...
    proxy = proxies.get("https") or proxies.get("all")
    if not proxy:
        return None
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    # urllib's NO_PROXY matcher (in every CPython 3; typeshed leaves it out).
    if urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy  # "proxy:3128", as curl reads it
    try:
        proxy_parts = urlsplit(proxy)
        proxy_parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        proxy_parts = None
    # Never the value in a message: a proxy URL may carry a password.
    if proxy_parts is None or not proxy_parts.hostname:
        raise InvalidArgument("HTTPS_PROXY / ALL_PROXY is not a proxy URL "
                              "(http://[user:password@]host:port)")
    if proxy_parts.scheme != "http":
        raise InvalidArgument(
            f"HTTPS_PROXY / ALL_PROXY names a {proxy_parts.scheme}:// proxy; aioflux goes "
            "through http:// proxies only (CONNECT). Add the endpoint's host to NO_PROXY "
            "to connect directly")
    return proxy


def proxy_note() -> str:
    """What a connection error adds on a machine with a proxy variable set:
    the failure may be a blocked direct route (an http:// endpoint, or one
    in NO_PROXY) or the proxy's, which the error alone would not tell. The
    value is never repeated: a proxy URL may carry a password."""
    named = next((var for var in _VARIABLES if os.environ.get(var)), None)
    if named is None:
        return ""
    return (f"; {named} is set: aioflux goes through HTTPS_PROXY (or ALL_PROXY) only "
            "to https:// endpoints outside NO_PROXY, and to any other directly")
