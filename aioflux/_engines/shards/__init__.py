"""Shards: many samples packed in one object (WebDataset tar, JSONL/text).

``_formats`` (what a format is; tar and lines, whole-shard compression),
``_names`` (the format a shard's name says: one table for the CLI and
the datasets),
``_index`` (per-sample offsets, lengths and crc32c; sidecar and cache
encoding), ``_build`` (finding shards and their indexes), ``_spans``
(reading runs of samples by ranged reads, checked), ``_writer`` (packing
samples into shards with their sidecars).
"""

from ._build import (
    expand_braces,
    is_sidecar,
    sidecar_matches,
    stream_index,
)
from ._formats import FORMATS, ShardFormat, compression_of, format_of
from ._index import (
    INDEX_SUFFIX,
    IndexCache,
    ShardIndex,
    decode_index,
    default_index_dir,
    encode_index,
)
from ._names import FORMAT_SUFFIXES, format_by_name, format_of_shards, plain_suffix
from ._spans import Run, ShardsDone, read_runs
from ._writer import (
    DEFAULT_MAX_COUNT,
    DEFAULT_MAX_SIZE,
    ShardPacker,
    check_compression,
    compressing,
    encode_sample,
    shard_namer,
)

__all__ = [
    "DEFAULT_MAX_COUNT",
    "DEFAULT_MAX_SIZE",
    "FORMATS",
    "FORMAT_SUFFIXES",
    "INDEX_SUFFIX",
    "IndexCache",
    "Run",
    "ShardFormat",
    "ShardIndex",
    "ShardPacker",
    "ShardsDone",
    "check_compression",
    "compressing",
    "compression_of",
    "decode_index",
    "default_index_dir",
    "encode_index",
    "encode_sample",
    "expand_braces",
    "format_by_name",
    "format_of",
    "format_of_shards",
    "is_sidecar",
    "plain_suffix",
    "read_runs",
    "shard_namer",
    "sidecar_matches",
    "stream_index",
]
