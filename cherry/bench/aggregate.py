"""Stack run records into one table: ``collect_records(paths) -> DataFrame`` and a CLI writing CSV/Parquet.

    python -m cherry.bench.aggregate --out-csv results/records/runs.csv \
        --out-parquet results/records/runs.parquet RECORD.json ...

Every record is validated against the record schema first (a bad file is named in a one-line error).
Columns follow the schema's order; list columns (per-step times, per-layer redundancy, per-epoch
curves) stay lists in the DataFrame and in Parquet, and are JSON-encoded strings in the CSV, so
`read_runs_csv` restores them. Both files are written atomically.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
from typing import Iterable, Optional

import pandas as pd

from cherry.bench.record import record_columns, validate_record
from cherry.io import read_json, write_bytes_atomic


def list_columns() -> tuple[str, ...]:
    """Columns whose values are lists (JSON-encoded in CSV)."""
    from cherry.schemas import load_schema

    props = load_schema("record")["properties"]
    return tuple(name for name, prop in props.items() if prop.get("type") == "array")


def collect_records(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per record file, columns in the schema's order (ValueError naming a bad file, or two
    files holding the same run)."""
    rows = []
    seen: dict[str, str] = {}
    for path in paths:
        record = read_json(path, "record")
        try:
            validate_record(record)
        except ValueError as exc:
            raise ValueError(f"record {str(path)!r}: {exc}") from None
        if record["run_id"] in seen:  # a record copied over another run's file: one run twice, one lost
            raise ValueError(f"record {str(path)!r} holds run {record['run_id']!r}, as {seen[record['run_id']]!r} "
                             "does: expected one record per run")
        seen[record["run_id"]] = str(path)
        record["record_path"] = str(path)
        rows.append(record)
    columns = list(record_columns()) + ["record_path"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame


def to_csv_bytes(frame: pd.DataFrame) -> bytes:
    out = frame.copy()
    for column in list_columns():
        if column in out:
            out[column] = [json.dumps(v) for v in out[column]]
    buffer = io.StringIO()
    out.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def read_runs_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV written by this module, decoding its list columns."""
    frame = pd.read_csv(path)
    for column in list_columns():
        if column in frame:
            frame[column] = [json.loads(v) if isinstance(v, str) else [] for v in frame[column]]
    return frame


def to_parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def write_tables(frame: pd.DataFrame, out_csv: Optional[str] = None, out_parquet: Optional[str] = None) -> None:
    if out_csv:
        write_bytes_atomic(out_csv, to_csv_bytes(frame))
    if out_parquet:
        write_bytes_atomic(out_parquet, to_parquet_bytes(frame))


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.outputs import add_output, parse_checked

    parser = argparse.ArgumentParser(prog="python -m cherry.bench.aggregate",
                                     description="stack run records into one CSV/Parquet table")
    parser.add_argument("records", nargs="*", help="record JSON files")
    add_output(parser, "--out-csv", default=None)
    add_output(parser, "--out-parquet", default=None)
    args = parse_checked(parser, argv)
    if not args.out_csv and not args.out_parquet:
        parser.error("give --out-csv and/or --out-parquet")
    try:
        frame = collect_records(args.records)
    except ValueError as exc:
        print(f"cherry.bench.aggregate: {exc}", file=sys.stderr)
        return 2
    write_tables(frame, args.out_csv, args.out_parquet)
    print(f"{len(frame)} records -> {', '.join(p for p in (args.out_csv, args.out_parquet) if p)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.bench.aggregate", main))
