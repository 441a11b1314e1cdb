"""What an object is called and what a store says of it.

- :mod:`.urls`: ``parse_url`` -> ``StoreURL``, each scheme's bucket and name
  rules; ``hf://``'s repo paths in :mod:`.hub_paths`; other packages'
  schemes, looked up by :mod:`.store_plugins`;
- :mod:`.types`: ``ObjectInfo``, ``ListPage`` and the other plain records.
"""
