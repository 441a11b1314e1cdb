"""The Azure Blob Storage backend (``az://`` URLs, and adlfs's ``abfs://``): :class:`AzureStore`.

Get Blob with checked ranges on the lean read path, Put Blob and Put Block
+ Put Block List with MD5s and aioflux's crc32c in the metadata, List
Blobs, Copy Blob; credentials from an account key (SAS tokens signed by
azure-storage-blob), a SAS, or Microsoft Entra ID (azure-identity), the
optional ``azure`` extra, imported only when a store is built.
"""

from ._store import AzureStore

__all__ = ["AzureStore"]
