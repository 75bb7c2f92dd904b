# Cherry benchmark workflow: datasets -> one process per run -> records -> table -> figures -> summary.
#
#   snakemake --cores all                                   default: CPU, generated data (~14 min on 2 cores)
#   snakemake --cores all --configfile config/paper.yaml --profile workflow/profiles/gpu
#   snakemake --report results/report.html                  HTML report of the figures
#
# After a crash or `kill -9`, the same command resumes: profiles/default (read by Snakemake itself)
# redoes incomplete jobs, and the block after `include: common.smk` releases a dead Snakemake's lock
# and sets corrupt records aside (cherry.bench.recovery) so that their runs are redone.
#
# The config is checked against workflow/schemas/config.schema.yaml, and every run it implies is
# checked against the run schema, before any job runs; a bad config stops here with one line.
import sys

import yaml
from snakemake.utils import min_version

from cherry.bench.experiments import describe_config_error
from cherry.bench.recovery import claim_lock, release_stale_lock, set_aside_corrupt_records
from cherry.schemas import load_yaml_strict

min_version("9.0")


# `--configfile FILE` replaces the default config instead of being merged into it, so a paper run
# never inherits a default experiment it does not list.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


try:  # YAML keeps the last of a repeated key silently; a config must say each key once
    for path in workflow.configfiles:
        load_yaml_strict(path)
except (ValueError, yaml.YAMLError) as exc:
    sys.exit(f"cherry workflow: {' '.join(str(exc).split())}")
# Checked by cherry's validator rather than snakemake.utils.validate: the schema's experiment keys come
# from the experiment table (cherry.bench.phases), and nothing is filled in (the run settings' defaults
# must not be written into every case's `run:`, where they would override the config's own `run:`).
CONFIG_PROBLEM = describe_config_error(config)
if CONFIG_PROBLEM is not None:
    sys.exit(f"cherry workflow: {CONFIG_PROBLEM}")


include: "workflow/rules/common.smk"


# Only the main Snakemake process recovers; cluster job steps and subprocesses parse this file too.
if not (workflow.remote_exec or workflow.subprocess_exec):
    for message in (release_stale_lock() + set_aside_corrupt_records(record_paths())
                    + set_aside_corrupt_records(fitted_record_paths(), named=False)):
        print(message, file=sys.stderr)
    claim_lock()


rule all:
    input:
        figures=figure_paths(),
        summary="results/summary.md",
        table="results/records/runs.csv",
        parquet="results/records/runs.parquet",
        planner=planner_paths(),
    default_target: True


include: "workflow/rules/data.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/records.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/planner.smk"
