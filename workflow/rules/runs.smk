# One benchmark run = one process = one record. By hand:
#   python -m cherry.bench.run --spec results/specs/RUN.json --out results/records/runs/RUN.json
# The runner writes its record atomically and exits 0 for ok, oom, timeout and skipped (results,
# not failures); any other error exits 1 and fails the job loudly (traceback in the log).


localrules:
    write_spec,


rule write_spec:
    output:
        spec="results/specs/{run}.json",
    log:
        "results/logs/specs/{run}.log",
    params:
        spec=spec_text,
    conda:
        CONDA_ENV
    script:
        "../scripts/write_spec.py"


rule run_benchmark:
    input:
        unpack(run_inputs),
    output:
        record="results/records/runs/{run}.json",
    log:
        "results/logs/runs/{run}.log",
    threads: run_threads
    priority: run_priority
    resources:
        gpu=run_gpus,
        timed_runs=run_timed,
    params:
        omp=run_omp_threads,
    conda:
        CONDA_ENV
    shell:
        # Snakemake exports OMP_NUM_THREADS={threads}; a timed run claims every core but computes on its own threads
        "OMP_NUM_THREADS={params.omp} MKL_NUM_THREADS={params.omp} "
        "python -m cherry.bench.run --spec {input.spec} --out {output.record} 2> {log}"


# The memory wall: one job per (case, system, K) searches the largest batch that trains under the
# capacity (doubling, then bisection; each probe a short run). By hand:
#   python -m cherry.bench.capacity_run --spec results/specs/SEARCH.json --out search.json
# Untimed: it measures memory, which jobs beside it do not change.
rule search_largest_batch:
    input:
        unpack(search_inputs),
    output:
        record="results/records/searches/{search}.json",
    log:
        "results/logs/searches/{search}.log",
    params:
        options=search_options,
    threads: THREADS
    resources:
        gpu=search_gpus,
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.capacity_run --spec {input.spec} --out {output.record} {params.options} 2> {log}"


# Accuracy under a cap: a plain system's largest setting that fits (its batch, or its fanouts) is
# searched once (probes of a few steps), then each seed trains with it. By hand:
#   python -m cherry.bench.fit_setting --spec results/specs/FIT.json --knob batch_size --out fit.json
#   python -m cherry.bench.run --spec results/specs/RUN.json --fit fit.json --out record.json
rule fit_setting:
    input:
        unpack(fit_inputs),
    output:
        record="results/records/fits/{fit}.json",
    log:
        "results/logs/fits/{fit}.log",
    params:
        options=fit_options,
    threads: THREADS
    resources:
        gpu=fit_gpus,
    conda:
        CONDA_ENV
    shell:
        "python -m cherry.bench.fit_setting --spec {input.spec} --out {output.record} {params.options} 2> {log}"


rule run_fitted:
    input:
        unpack(fitted_inputs),
    output:
        record="results/records/fitted/{run}.json",
    log:
        "results/logs/fitted/{run}.log",
    threads: THREADS
    resources:
        gpu=fitted_gpus,
        timed_runs=fitted_timed,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m cherry.bench.run --spec {input.spec} --fit {input.fit} --out {output.record} 2> {log}"
