"""``RecordingFileWriter``: a DCP data file written straight into a local file.

The local counterpart of ``_dcp_crc.RecordingWriter``: the bytes go
through ``FileWriter`` (each piece read back and checked as it is written,
see ``aioflux/local/_file_writer.py``), and the crc32c of the bytes
between the positions DCP asks for (``tell()``, at each item's start and
end) are kept as :class:`Segments`, from the writer's running crc32c: the
crc32c of the bytes since the last mark is the running value now, less
the running value then shifted over them. No byte is checksummed twice.

A checkpoint's data files and its items' crc32c are renamed into place
without an fsync of their directory: its metadata, written last into the
same directory, syncs it once for all of them (``publish_checked``).
Every other file syncs its directory as it is published.
"""

from __future__ import annotations

from ..._core.integrity.crc import crc32c_combine
from ...local._file_writer import FileWriter
from ._dcp_crc import ITEM_CRCS, Segments

__all__ = ["RecordingFileWriter"]

# Names of the files a checkpoint's metadata commits (see above).
_COMMITTED_BY_METADATA = (".distcp", ITEM_CRCS)


class RecordingFileWriter(FileWriter):
    """A FileWriter that keeps :class:`Segments` of what DCP writes.

    Args:
        bucket: the first directory of the path.
        name: the rest of the path.
    """

    def __init__(self, bucket: str, name: str) -> None:
        super().__init__(bucket, name,
                         sync_directory=not name.endswith(_COMMITTED_BY_METADATA))
        self.segments = Segments()
        self._marked = (0, 0)  # (position, running crc32c there)

    def tell(self) -> int:
        """Bytes written so far; the bytes since the last call end a segment."""
        self._flush_gathered()
        at, running = self._crc.length, self._crc.value
        start, before = self._marked
        if at != start:
            own = running ^ crc32c_combine(before, 0, at - start)
            self.segments.add(own, at - start)
            self.segments.mark(at)
            self._marked = (at, running)
        return at

    def close(self) -> None:
        """Publish the file (see :meth:`FileWriter.close`); the last segment ends here."""
        if self._open and not self._failed:
            self.tell()
        super().close()
