"""``Client``: the blocking twin of :class:`~aioflux.AsyncClient`.

Every method runs the async one on the process's portal loop. A Client can
be pickled (DataLoader workers under ``spawn``): it is rebuilt from its
settings on the other side, and after ``fork`` it rebuilds its connections
lazily, because the portal and the transport both check the process id.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any, cast

from ._bridge import get_portal, iterate
from ._client import AsyncClient, Buffer, SourceSpec
from ._config import ClientConfig
from ._types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo

__all__ = ["Client"]



class Client:
    """Blocking GCS client; same arguments and operations as AsyncClient.

    Args:
        config: client settings.
        endpoint: API root (defaults to ``STORAGE_EMULATOR_HOST`` or GCS).
        credentials: as for :class:`~aioflux.AsyncClient`.
        project: project for bucket creation.
    """

    def __init__(self, config: ClientConfig | None = None, *, endpoint: str | None = None,
                 credentials: Any = None, project: str = "aioflux") -> None:
        self._settings = {"config": config, "endpoint": endpoint, "credentials": credentials,
                          "project": project}
        self.aio = AsyncClient(config, endpoint=endpoint, credentials=credentials,
                               project=project)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._settings)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client's connections."""
        get_portal().call(self.aio.aclose())

    def __del__(self) -> None:
        # A forgotten close() must not leak a connector warning at GC time:
        # close on the portal loop without waiting (best effort at exit).
        aio = getattr(self, "aio", None)
        if aio is None or aio.transport.idle:
            return
        try:
            portal = get_portal()
            if not portal.in_loop_thread():
                portal.submit(aio.aclose())
        except Exception:  # interpreter shutdown: nothing left to close with
            return

    def stat(self, bucket: str, name: str) -> ObjectInfo:
        """See :meth:`AsyncClient.stat`."""
        return get_portal().call(self.aio.stat(bucket, name))

    def exists(self, bucket: str, name: str) -> bool:
        """See :meth:`AsyncClient.exists`."""
        return get_portal().call(self.aio.exists(bucket, name))

    def list(self, bucket: str, prefix: str = "", **kwargs: Any) -> Iterator[ListPage]:
        """See :meth:`AsyncClient.list`; yields pages."""
        return iterate(self.aio.list(bucket, prefix, **kwargs), batch=1)

    def list_objects(self, bucket: str, prefix: str = "", **kwargs: Any) -> Iterator[ObjectInfo]:
        """See :meth:`AsyncClient.list_objects`; yields objects."""
        for page in self.list(bucket, prefix, **kwargs):
            yield from page.objects

    def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
             into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """See :meth:`AsyncClient.read`."""
        result = get_portal().call(self.aio.read(bucket, name, start=start, end=end,
                                                 into=into, generation=generation))
        return cast("bytes | int", result)

    def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview,
              **kwargs: Any) -> ObjectInfo:
        """See :meth:`AsyncClient.write`."""
        return get_portal().call(self.aio.write(bucket, name, data, **kwargs))

    def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec],
                **kwargs: Any) -> ObjectInfo:
        """See :meth:`AsyncClient.compose`."""
        return get_portal().call(self.aio.compose(bucket, destination, sources, **kwargs))

    def delete(self, bucket: str, name: str, **kwargs: Any) -> None:
        """See :meth:`AsyncClient.delete`."""
        get_portal().call(self.aio.delete(bucket, name, **kwargs))

    def create_bucket(self, bucket: str) -> None:
        """See :meth:`AsyncClient.create_bucket`."""
        get_portal().call(self.aio.create_bucket(bucket))

    def initiate_multipart(self, bucket: str, name: str, **kwargs: Any) -> str:
        """See :meth:`AsyncClient.initiate_multipart`."""
        return get_portal().call(self.aio.initiate_multipart(bucket, name, **kwargs))

    def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                    data: bytes | bytearray | memoryview,
                    checksum: int | None = None) -> PartInfo:
        """See :meth:`AsyncClient.upload_part`."""
        return get_portal().call(self.aio.upload_part(bucket, name, upload_id, part_number, data,
                                                      checksum))

    def complete_multipart(self, bucket: str, name: str, upload_id: str,
                           parts: Sequence[PartInfo]) -> dict[str, str]:
        """See :meth:`AsyncClient.complete_multipart`."""
        return get_portal().call(self.aio.complete_multipart(bucket, name, upload_id, parts))

    def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """See :meth:`AsyncClient.abort_multipart`."""
        get_portal().call(self.aio.abort_multipart(bucket, name, upload_id))

    def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """See :meth:`AsyncClient.list_parts`."""
        return get_portal().call(self.aio.list_parts(bucket, name, upload_id))

    def list_multipart_uploads(self, bucket: str,
                               prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """See :meth:`AsyncClient.list_multipart_uploads`."""
        return get_portal().call(self.aio.list_multipart_uploads(bucket, prefix))
