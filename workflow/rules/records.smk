# Records -> one table (CSV with JSON-encoded list columns, and Parquet); gradient-equivalence checks.
# The table's files are `update` outputs: Snakemake keeps the previous table while the aggregation
# reruns and restores it if the aggregation fails, so a failure never leaves the workflow without one.
# Corrupt records set aside by the Snakefile (`<record>.corrupt`) are inputs too: a new one changes the
# set of inputs, so the aggregation reruns and the missing record's run is redone first.
from cherry.bench.recovery import corrupt_copies


rule aggregate_records:
    input:
        records=record_paths() + fitted_record_paths(),
        corrupt=corrupt_copies(record_paths() + fitted_record_paths()),
    output:
        table=update("results/records/runs.csv"),
        parquet=update("results/records/runs.parquet"),
    log:
        "results/logs/aggregate_records.log",
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.aggregate --out-csv {output.table} --out-parquet {output.parquet}"
        " {input.records} 2> {log}"


rule verify_gradient:
    input:
        unpack(check_inputs),
    output:
        record="results/verify/{check}.json",
    log:
        "results/logs/verify/{check}.log",
    params:
        options=check_arguments,
    threads: THREADS
    resources:
        gpu=check_gpus,
    conda:
        CONDA_ENV
    shell:
        "python -m cherry verify {params.options} --json {output.record} > {log} 2>&1"
