"""Copy a benchmark folder with its bf16 rows relabelled fp16: problem keys, dtype and kernel names.

What the copy is for: scoring fp16 models on measurements of the current binaries, which exist only in bf16, under
the dtype transfer this report checks (``transfer_compare_*.json``). The times are the bf16 ones; nothing else
changes.

Usage (repository root): python models/reports/2026-11-29_h200_s37/relabel_fp16.py SOURCE_DIR DEST_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd


def relabel(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.suffix == ".parquet":
            rows = pd.read_parquet(path)
            rows = rows[rows.dtype == "bf16"].copy()
            for column in ("problem_key", "shape_key"):
                if column in rows:
                    rows[column] = rows[column].astype(str).str.replace("|bf16|", "|fp16|", regex=False)
            rows["dtype"] = "fp16"
            rows["kernel"] = rows.kernel.str.replace("_bf16_", "_fp16_", regex=False)
            rows.to_parquet(dest / path.name)
        elif path.is_file():
            shutil.copy(path, dest / path.name)


if __name__ == "__main__":
    relabel(Path(sys.argv[1]), Path(sys.argv[2]))
