"""``AiofluxFileSystem``: an ``fsspec.asyn.AsyncFileSystem`` over the storage protocol.

One class serves every store aioflux has (``scheme``: ``gs``, ``s3``,
``az``, ``file``); its methods are the store's checked reads and
all-or-nothing writes.

The class is fsspec's API, put together from its groups of methods: the
store, settings and paths they stand on in ``_base``; ``info``, ``ls``,
``find`` and the object's version and time in ``_metadata``; ``cat`` and
``get`` in ``_reads``; ``pipe``, ``put``, ``rm``, ``touch`` and ``copy`` in
``_writes``; ``open`` and ``open_async`` in ``_opening``. The work behind
them lives beside them: entries of ``info``/``ls``/``find`` in
``_entries``, what the store says of paths in ``_listing``, ``cat_ranges``
in ``_ranges``, ``get_file``/``put_file`` in ``_transfers``, and the files
``open`` returns in ``_read_file``, ``_write_file`` and ``_async_file``.
"""

from __future__ import annotations

import functools
from typing import Any

from ._metadata import MetadataMethods
from ._opening import OpenMethods
from ._reads import ReadMethods
from ._writes import WriteMethods

__all__ = ["AiofluxFileSystem", "protocol_class"]


class AiofluxFileSystem(MetadataMethods, ReadMethods, WriteMethods, OpenMethods):
    """fsspec filesystem over aioflux's stores: ``gs``, ``s3``, ``az`` or ``file``.

    Args:
        scheme: the store (a URL's protocol picks it when fsspec builds the
            filesystem from a URL; default ``gs``, or the protocol
            :func:`~aioflux.fsspec.register` made this class for).
        config: ClientConfig of the store.
        endpoint: API root (``gs``, ``s3``, ``az``); s3fs's and gcsfs's
            ``endpoint_url`` (also in ``client_kwargs``) is taken too.
        credentials: GCS credentials (``gs`` only; gcsfs's ``token="anon"``
            is ``"anonymous"``).
        region: the S3 region (``s3`` only; s3fs's
            ``client_kwargs={"region_name": ...}`` is taken too).
        asynchronous: fsspec's async mode (call the ``_`` coroutines on your loop).
        loop: ignored in sync mode (aioflux's portal loop runs the calls).
        **storage_options: fsspec's own settings (``skip_instance_cache``...),
            among them the metadata cache's: ``use_listings_cache=False``
            turns it off, ``listings_expiry_time`` is how long (seconds) an
            entry answers (default 10; ``None``: until invalidated). Off by
            default on ``file``, as in fsspec's ``LocalFileSystem``. Also
            the billing of requester-pays buckets: ``user_project=`` (the
            project ``gs`` requests bill; gcsfs's ``requester_pays=True``
            with ``project=``, or ``requester_pays="my-project"``) and
            ``requester_pays=True`` (``s3``, as s3fs names it).

    Raises:
        InvalidArgument: an unknown scheme, a setting of the wrong type, or
            one aioflux does not take (s3fs's ``key``, gcsfs's
            ``version_aware``...): said, not dropped.
    """

    protocol: tuple[str, ...] = ("aioflux-gs", "aioflux-s3", "aioflux-az", "aioflux-file")
    # The protocol of a class protocol_class() made (register()), else None.
    _registered_as: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # A class register() made exists only in the processes that called
        # it: unpickled elsewhere (a spawned DataLoader worker), it is made
        # again from its protocol.
        cls = type(self)
        if cls._registered_as is None:
            return super().__reduce__()  # type: ignore[no-any-return]
        return _rebuild, (cls._registered_as, cls.default_scheme, self.storage_args,
                          self.storage_options)


@functools.cache
def protocol_class(name: str, scheme: str) -> type[AiofluxFileSystem]:
    """The subclass serving ``name://`` URLs on ``scheme``'s store, which
    :func:`~aioflux.fsspec.register` installs.

    One class per protocol, made again by the same call wherever one of its
    instances is unpickled.

    Args:
        name: the protocol (``gs``, ``s3``...).
        scheme: the store serving it (``gs``, ``s3`` or ``file``).

    Returns:
        The class.
    """
    own = f"aioflux-{scheme}"
    return type(f"AiofluxFileSystem_{name}", (AiofluxFileSystem,),
                {"protocol": (name,) if name == own else (name, own), "default_scheme": scheme,
                 "_registered_as": name, "__module__": "aioflux.fsspec"})


def _rebuild(name: str, scheme: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> AiofluxFileSystem:
    return protocol_class(name, scheme)(*args, **kwargs)
