"""fsspec filesystem over aioflux's stores (``pip install fsspec``).

``AiofluxFileSystem`` serves ``aioflux-gs://``, ``aioflux-s3://``,
``aioflux-az://``, ``aioflux-file://`` and the read-only ``aioflux-http://``,
``aioflux-https://`` and ``aioflux-hf://`` (the Hugging Face Hub) URLs,
which installing aioflux registers with fsspec
(and nothing else: gcsfs and s3fs keep ``gs://`` and ``s3://``).
:func:`register` makes chosen protocols (``gs``, ``s3``...) go through
aioflux for this process, for tools that only take those URLs (pandas,
pyarrow, Lightning, torch DCP, zarr).
"""

from __future__ import annotations

import typing

try:
    import fsspec as _fsspec  # noqa: F401
except ImportError:  # pragma: no cover - the message names the extra
    raise ImportError("aioflux.fsspec needs fsspec: pip install 'aioflux-storage[fsspec]'") \
        from None

from .._core.records.store_plugins import plugin_scheme as _plugin_scheme
from ._filesystem import AiofluxFileSystem
from ._filesystem import protocol_class as _protocol_class
from ._paths import SCHEME_OF as _SCHEME_OF
from ._writes import TouchRefused

if typing.TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["AiofluxFileSystem", "TouchRefused", "register"]

# The classes of aioflux's own protocol names (the ``fsspec.specs`` entry
# points): ``fsspec.filesystem("aioflux-s3")`` hands the class no URL to
# take the store from, so each name's class knows its own (one class for
# the four made every one of them a GCS filesystem).
_aioflux_gs = _protocol_class("aioflux-gs", "gs")
_aioflux_s3 = _protocol_class("aioflux-s3", "s3")
_aioflux_az = _protocol_class("aioflux-az", "az")
_aioflux_file = _protocol_class("aioflux-file", "file")
# Read-only web servers (writes and listings refused by the store).
_aioflux_http = _protocol_class("aioflux-http", "http")
_aioflux_https = _protocol_class("aioflux-https", "https")
# The Hugging Face Hub, read-only (huggingface_hub's HfFileSystem keeps hf://).
_aioflux_hf = _protocol_class("aioflux-hf", "hf")



def register(protocols: Iterable[str] = ("gs", "s3")) -> None:
    """Make fsspec open these protocols' URLs with aioflux, in this process.

    Replaces whatever fsspec had for them (gcsfs, s3fs, its local
    filesystem) until the process ends. Call it in every process that
    opens such URLs through fsspec (each DDP rank's script; DataLoader
    workers forked after the call inherit it). A filesystem it made
    pickles: a spawned worker unpickles it without calling it.

    Args:
        protocols: among ``gs``, ``gcs``, ``s3``, ``s3a``, ``az``, ``abfs``,
            ``abfss``, ``file``, ``local``, ``http``, ``https``, ``hf`` (read-only;
            ``hf`` then replaces ``huggingface_hub``'s ``HfFileSystem``).

    Raises:
        InvalidArgument: a protocol aioflux does not serve.
    """
    import fsspec

    from .._core.errors import InvalidArgument

    if isinstance(protocols, str):
        protocols = [protocols]
    for name in protocols:
        # A scheme another package serves (an aioflux.stores entry point) is its own.
        scheme = _SCHEME_OF.get(name) or (name if _plugin_scheme(name) else None)
        if scheme is None:
            raise InvalidArgument(f"aioflux.fsspec.register: aioflux serves "
                                  f"{', '.join(sorted(_SCHEME_OF))}, not {name!r}")
        fsspec.register_implementation(name, _protocol_class(name, scheme), clobber=True)
