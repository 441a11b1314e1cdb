"""Shards: many samples packed in one object (WebDataset tar, JSONL/text).

``_formats`` (what a format is; tar and lines, whole-shard compression),
``_index`` (per-sample offsets, lengths and crc32c; sidecar and cache
encoding), ``_build`` (finding shards and their indexes), ``_spans``
(reading runs of samples by ranged reads, checked), ``_writer`` (packing
samples into shards with their sidecars).
"""

from ._build import chain_counts, expand_braces, index_shards, is_sidecar, stream_index
from ._formats import FORMATS, ShardFormat, compression_of, format_of
from ._index import (
    INDEX_SUFFIX,
    IndexCache,
    ShardIndex,
    decode_index,
    default_index_dir,
    encode_index,
)
from ._spans import Run, read_runs

__all__ = [
    "FORMATS",
    "INDEX_SUFFIX",
    "IndexCache",
    "Run",
    "ShardFormat",
    "ShardIndex",
    "chain_counts",
    "compression_of",
    "decode_index",
    "default_index_dir",
    "encode_index",
    "expand_braces",
    "format_of",
    "index_shards",
    "is_sidecar",
    "read_runs",
    "stream_index",
]
