"""The local-filesystem backend: ``file:///path`` URLs and plain paths.

Use it for checkpoints on NFS or Lustre, data on local disks, and tests
without any server. See :class:`LocalStore`.
"""

from ._store import LocalStore

__all__ = ["LocalStore"]
