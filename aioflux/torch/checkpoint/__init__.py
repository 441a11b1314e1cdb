"""Checkpoints: ``Checkpoint``, ``CheckpointManager`` (background saves,
snapshots, publishing, retention, history), the DCP storage's parts and
device loads. The public names are :mod:`aioflux.torch`'s (and
:mod:`aioflux.torch.dcp`'s); these modules are private."""
