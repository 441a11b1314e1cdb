"""What comes in, checked before it is used.

- :mod:`.arguments`: a caller's arguments, before any request is sent;
- :mod:`.stated_counts`: a count a server states (a size, a generation),
  read strictly;
- :mod:`.pages`: what every page of a listing must be.
"""
