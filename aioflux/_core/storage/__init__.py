"""The storage protocol every backend offers the layers above.

- :mod:`.protocol`: ``ObjectStore``, ``StoreFeatures`` and the protocols a
  store may add;
- :mod:`.base`: ``StoreBase``, the operations written once over a
  backend's wire calls;
- :mod:`.etags`: the memory of the ETags behind S3's and Azure's hashed
  generations.
"""
