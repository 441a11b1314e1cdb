"""The first row of a Parquet dataset waits on no import: pyarrow looks for
pandas at ``pa.array`` of a list (and ``pa.table`` of a dict), and a
process's first look imports it, seconds of CPU on a busy host, in each
DataLoader worker too. Run in a fresh interpreter, whose modules are its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

_SCRIPT = textwrap.dedent(
    """
    import sys
    from aioflux.torch import ShardDataset

    ds = ShardDataset(sys.argv[1], format="parquet", seed=1, index_dir=sys.argv[2])
    rows = iter(ds)
    first = next(rows)
    print(first["id"], "pandas" in sys.modules)
    """
)


def test_the_first_row_imports_no_pandas(tmp_path: Path) -> None:
    # pandas is in the test extra: the pyarrow call that imports it would here.
    __import__("pandas")
    path = tmp_path / "part-0.parquet"
    table = pa.table(
        {"id": pa.array(range(64), pa.int64()), "text": [f"row {i}" for i in range(64)]}
    )
    pq.write_table(table, path, row_group_size=16, write_page_checksum=True)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, path.as_uri(), str(tmp_path / "idx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    row, imported = done.stdout.split()
    assert 0 <= int(row) < 64
    assert imported == "False"
