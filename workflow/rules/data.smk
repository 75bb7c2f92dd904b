# Datasets: generated ones are written once in OGB's layout and cached; real OGB ones must already
# lie in the data directory (`cherry data prepare` converts them and fails with a one-line message
# naming the missing files). Seed orderings are computed once per dataset, before runs use them.


rule prepare_dataset:
    output:
        info="results/data/{dataset}/info.json",
    log:
        "results/logs/data/{dataset}.log",
    params:
        root=root_option,
        name=dataset_arg,
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        "python -m cherry data prepare {params.name} {params.root} > {log} 2>&1"
        " && python -m cherry data info {params.name} {params.root} > {output.info} 2>> {log}"


rule order_seeds:
    input:
        info="results/data/{dataset}/info.json",
    output:
        stamp="results/data/{dataset}/ordering-{ordering}-{seed}.json",
    log:
        "results/logs/data/{dataset}-ordering-{ordering}-{seed}.log",
    params:
        root=ordering_root,
        name=dataset_name,
    threads: THREADS
    conda:
        CONDA_ENV
    script:
        "../scripts/order_seeds.py"
