"""Snakemake script (rule write_spec): write one planned run's spec JSON atomically.

The spec was validated and its id computed when the workflow planned the runs; this job only writes
it, with the standard library alone (importing torch would cost seconds for each of hundreds of runs).
"""
import json
import os
import tempfile

snakemake = globals()["snakemake"]  # injected by Snakemake
spec = json.loads(snakemake.params.spec)
path = snakemake.output.spec
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".spec.", suffix=".tmp")
with os.fdopen(fd, "w", encoding="utf-8") as f:
    json.dump(spec, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(tmp, path)
with open(snakemake.log[0], "w", encoding="utf-8") as log:
    print(f"wrote {path} (run {snakemake.wildcards.run}: {spec['system']} on {spec['dataset']}, experiment {spec['experiment'] or '-'})",
          file=log)
