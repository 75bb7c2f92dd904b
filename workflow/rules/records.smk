# Records -> one table (CSV with JSON-encoded list columns, and Parquet); gradient-equivalence checks.


rule aggregate_records:
    input:
        records=record_paths(),
    output:
        table="results/records/runs.csv",
        parquet="results/records/runs.parquet",
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
        text="results/verify/{check}.txt",
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
        "python -m cherry verify {params.options} > {output.text} 2> {log}"
