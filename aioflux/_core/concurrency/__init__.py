"""How work runs side by side.

- :mod:`.portal`: the background event-loop thread that sync code drives;
- :mod:`.window`: the in-flight window every pipeline bounds its work with;
- :mod:`.cleanup`: clean-up awaited to its end however often its caller is
  cancelled;
- :mod:`.locks`: what every ``flock`` taker does;
- :mod:`.share`: a process's share of the machine, and its thread pools' size.
"""
