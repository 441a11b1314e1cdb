"""Checksums of the bytes: crc32c computed, encoded as GCS does and
combined (:mod:`.crc`), MD5 off the event loop for stores that promise
only that (:mod:`.md5`)."""
