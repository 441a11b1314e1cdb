"""Settings: ``ClientConfig``, ``RetryPolicy``, ``Timeouts``
(:mod:`.config`), the retry loop that follows them (:mod:`.retry`), and
``WriterOptions`` / ``ReaderOptions`` (:mod:`.options`)."""
