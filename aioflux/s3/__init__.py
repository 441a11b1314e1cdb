"""The Amazon S3 backend (``s3://`` URLs, and S3-compatible stores): :class:`S3Store`.

ListObjectsV2, ranged GETs on the lean read path, PUT and multipart uploads
with crc32c, CopyObject (UploadPartCopy past 5 GiB) and DeleteObjects;
credentials and SigV4 signing from botocore (``pip install
"aioflux-storage[s3]"``), imported only when a store is built.
"""

from ._store import S3Store

__all__ = ["S3Store"]
