"""The datasets and what they read by: epoch orders, samplers, rank and
worker shares, shards and the shard writer. The public names are
:mod:`aioflux.torch`'s; these modules are private."""
