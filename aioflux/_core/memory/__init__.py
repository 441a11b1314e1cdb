"""Bytes and objects held in as little memory as they need.

- :mod:`.buffers`: destination buffers left unwritten until the bytes land;
- :mod:`.gc_pause`: the cyclic collector paused while a page is built;
- :mod:`.growing`: typed arrays grown in mappings of their own;
- :mod:`.prefault`: fresh memory made present before a read lands in it;
- :mod:`.shared_columns`: one block of bytes a node's processes share;
- :mod:`.columns` and :mod:`.object_index`: ``ObjectIndex``, a dataset's
  objects in compact columns laid out in such a block.
"""
