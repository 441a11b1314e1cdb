"""Layer 2: HTTP. The aiohttp transport (semaphore, retries, auth per
request, no redirects, credentials only to the endpoint's origin), the lean
HTTP/1.1 media pool, checked and resumed media reads, and the mapping of
failures to typed errors. Knows nothing of any one store's API."""
