"""The files behind an OGB dataset directory, and what is wrong with one that OGB's loader refuses.

`source_files` maps each array to the file OGB reads it from (``processed/data_processed`` if OGB
cached one, else the raw CSV or npz files and the split files). `file_problem` re-reads one file on
its own (the whole gzip stream, so a truncated or bit-flipped member is found, then the CSV parse;
an npz without pickles; a pickled file's archive CRCs only, never unpickled: that would run its code),
so that `unreadable_error` can name the culprit after OGB failed with a bare EOFError or zlib error.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from cherry.data.checks import SPLITS
from cherry.extras import require

_SCAN_BLOCK_BYTES = 8 << 20


def source_files(directory: Path, split: str, binary: bool, extra, raw_only: bool = False) -> dict[str, Path]:
    """Which file OGB's loader takes each array from: keys ``edges``, ``num_nodes``, ``num_edges``,
    ``features``, ``labels``, `SPLITS` and ``extra`` (a tuple of further node files), for a dataset in
    ``directory`` with split ``split``, binary (npz) or CSV raw files and additional node files.
    ``raw_only``: the raw and split files even where OGB cached ``processed/data_processed`` or
    ``split_dict.pt`` (what `cherry.data.bounded` reads)."""
    processed = directory / "processed" / "data_processed"
    if processed.exists() and not raw_only:
        graph = {k: processed for k in ("edges", "num_nodes", "num_edges", "features", "labels")}
    elif binary:
        graph = {k: directory / "raw" / "data.npz" for k in ("edges", "num_nodes", "num_edges", "features")}
        graph["labels"] = directory / "raw" / "node-label.npz"
    else:
        raw = directory / "raw"
        graph = {"edges": raw / "edge.csv.gz", "num_nodes": raw / "num-node-list.csv.gz",
                 "num_edges": raw / "num-edge-list.csv.gz", "features": raw / "node-feat.csv.gz",
                 "labels": raw / "node-label.csv.gz"}
    split_dir = directory / "split" / split
    packed = split_dir / "split_dict.pt"
    splits = {s: packed if packed.exists() and not raw_only else split_dir / f"{s}.csv.gz" for s in SPLITS}
    cached = processed.exists() and not raw_only
    extras = tuple(directory / "raw" / f"{f}.csv.gz" for f in extra) if not (binary or cached) else ()
    return {**graph, **splits, "extra": extras}


def unreadable_error(directory: Path, files: dict, exc: BaseException) -> ValueError:
    """A one-line error naming the file OGB's loader failed on (found by reading each file again)."""
    from cherry.safe_load import refusal, unsafe_load_reason

    reason = unsafe_load_reason(exc)
    if reason is not None:  # one of the pickled files: name those present
        pickled = [str(p) for k, p in files.items() if k != "extra" and p.exists()
                   and not p.name.endswith((".csv.gz", ".npz"))]
        return ValueError(refusal(" or ".join(dict.fromkeys(pickled)) or str(directory), reason,
                                  "delete it: OGB writes it again from the raw files"))
    paths = dict.fromkeys(p for k, v in files.items() for p in (v if k == "extra" else (v,)))
    for path in paths:
        problem = file_problem(path)
        if problem:
            return ValueError(f"{path} {problem}; replace it with the original file from OGB")
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return ValueError(f"OGB's loader could not read {directory}: {type(exc).__name__}: {reason}")


def file_problem(path: Path) -> str | None:
    """What is wrong with one of OGB's input files (gzip integrity, CSV parse, npz load,
    the CRCs of a pickle's archive; a pickle is never unpickled here), or None."""
    path = Path(path)
    try:
        if path.name.endswith(".csv.gz"):
            with gzip.open(path, "rb") as f:  # the whole stream: every member's CRC and length
                while f.read(_SCAN_BLOCK_BYTES):
                    pass
            import pandas as pd

            frame = pd.read_csv(path, compression="gzip", header=None)
            for column in frame.columns:
                numeric = pd.to_numeric(frame[column], errors="coerce")
                text = numeric.isna() & frame[column].notna()
                if bool(text.any()):
                    row = int(text.to_numpy().nonzero()[0][0])
                    return f"holds {frame[column].iloc[row]!r} at row {row}, column {column}; expected numbers"
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                for key in npz.files:
                    npz[key]
        elif path.exists():
            return _pickle_archive_problem(path)
    except EOFError:
        return "is truncated (the gzip stream ends before its end-of-stream marker)"
    except (gzip.BadGzipFile, zlib.error) as exc:
        return f"is not a valid gzip file ({exc})"
    except Exception as exc:  # pandas' parser errors, zipfile, pickle: name the file and the reason
        reason = str(exc).splitlines()[0] if str(exc) else ""
        return f"cannot be parsed ({type(exc).__name__}: {reason})"
    return None


def _pickle_archive_problem(path: Path) -> str | None:
    """What is wrong with the container of one of OGB's pickled files (``processed/data_processed``,
    ``split_dict.pt``): every member's CRC is read, nothing is unpickled. Unpickling runs code, so only
    OGB's own loader, which must, does it; this path never does."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except zipfile.BadZipFile as exc:
        return f"is not a torch.save archive ({exc}); OGB writes it again when it is deleted"
    if bad is not None:
        return f"is corrupt (member {bad} fails its CRC check); OGB writes it again when it is deleted"
    return None


def declared_edges(files: dict) -> int | None:
    """The edge count ``raw/num-edge-list.csv.gz`` declares (CSV layout only; OGB drops no short file)."""
    path = files["num_edges"]
    if not path.name.endswith(".csv.gz"):
        return None
    pd = require("pandas")

    counts = pd.read_csv(path, compression="gzip", header=None).values.reshape(-1)
    if counts.size != 1:
        raise ValueError(f"{path} must hold one edge count (a single graph), got {counts.size} values")
    return int(counts[0])


def check_edge_rows(path: Path, declared: int, chunk_rows: int = 4_000_000) -> None:
    """The raw edge CSV at ``path`` holds exactly ``declared`` rows of integer ids: OGB's loader keeps
    the first ``declared`` rows and drops the rest, and casts ``1.5`` to 1, so neither would show in
    what it returns. Raises a one-line ValueError naming the file, the row and the value."""
    import numpy as np

    pd = require("pandas")
    rows = 0
    with pd.read_csv(path, compression="gzip", header=None, chunksize=chunk_rows) as chunks:
        for chunk in chunks:
            values = chunk.to_numpy()
            if values.dtype.kind == "f":
                bad = ~np.isfinite(values) | (values != np.floor(values))
                if bad.any():
                    row, column = (int(i) for i in np.argwhere(bad)[0])
                    raise ValueError(f"{path} holds {values[row, column].item()!r} at row {rows + row}, "
                                     f"column {column}; expected integer node ids")
            elif values.dtype.kind not in "iu":
                raise ValueError(f"{path} holds values that are not integers: expected integer node ids")
            rows += len(values)
    if rows > declared:
        raise ValueError(f"{path} has {rows} edge rows, the dataset declares {declared} "
                         "(raw/num-edge-list.csv.gz): expected exactly that many")
