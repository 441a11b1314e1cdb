"""Layer 5: the URL-level API. A URL's scheme picks the store
(``stores.py``); ``open``, the iterables and the blocking ``Client`` twin sit
on the backends and the engines."""
