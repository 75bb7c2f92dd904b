"""Snakemake script (rule write_spec): write one planned run's spec JSON atomically.

The spec was validated and its id computed when the workflow planned the runs; this job only writes
it, with the standard library alone (importing torch would cost seconds for each of hundreds of runs).
A fault (disk full, permission) is one line through cherry's error boundary (`cherry.errors`).
"""
import json
import os
import sys
import tempfile

from cherry.errors import run_boundary

snakemake = globals()["snakemake"]  # injected by Snakemake


def write_spec() -> int:
    spec = json.loads(snakemake.params.spec)
    path = snakemake.output.spec
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".spec.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:  # named by the spec's path, not the temporary's
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise OSError(exc.errno, exc.strerror, path) from exc
    with open(snakemake.log[0], "w", encoding="utf-8") as log:
        print(f"wrote {path} (run {snakemake.wildcards.run}: {spec['system']} on {spec['dataset']}, "
              f"experiment {spec['experiment'] or '-'})", file=log)
    return 0


sys.exit(run_boundary("write_spec", write_spec))
