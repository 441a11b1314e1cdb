"""The Google Cloud Storage backend (``gs://`` URLs): :class:`GcsStore`
(``AsyncClient``, its other name).

JSON API for metadata, listing and reads (lean HTTP/1.1 for media), XML
multipart and JSON resumable uploads, server-side compose.
"""

from ._client import AsyncClient, GcsStore

__all__ = ["AsyncClient", "GcsStore"]
