# Shared names and every decision of the workflow, as named functions (no lambdas in rules).
# The run matrix comes from cherry.bench.experiments.expand_experiments, the same function the
# tests call; a run's readable id (cherry.spec.run_id) names its spec and record files.
import json
import os
import shlex
import sys

from cherry.bench.phases import PHASES, figure_sources, timed_phases
from cherry.data.ogb_dir import dataset_slug, is_dataset_path
from cherry.bench.experiments import (
    ConfigError,
    check_datasets_available,
    datasets_used,
    graphs_dir_of,
    needs_ordering,
    plan_fits,
    plan_runs,
    plan_searches,
    verify_arguments,
    verify_checks,
)

# Bare `NAME.npz` datasets are read from the config's graphs directory (else $CHERRY_GRAPHS, else
# ../shared/graphs), by this process and its jobs wherever they run (envvars below); the specs name
# the file only, the same on every machine.
os.environ["CHERRY_GRAPHS"] = graphs_dir_of(config, workflow.basedir)

try:
    RUNS = plan_runs(config)
    SEARCHES = plan_searches(config)  # the memory wall: one largest-batch search per system and K
    # accuracy under a cap: setting searches, and the runs that train with what each found
    FITS, FITTED = plan_fits(config)
    CHECKS = verify_checks(config)
except ConfigError as exc:
    sys.exit(f"cherry workflow: {exc}")


def dry_run():
    """Whether Snakemake only plans (-n): at parse time its executor is not set up yet, so
    `workflow.dryrun` still says False; the output settings know."""
    return bool(getattr(workflow.output_settings, "dryrun", False) or workflow.dryrun)


try:
    check_datasets_available(config)  # a real dataset missing from the data root stops here, not in a job
except ConfigError as exc:
    if not dry_run():
        sys.exit(f"cherry workflow: {exc}")
    # a dry run only plans: a user on a new cluster sees the plan before placing the data
    print(f"cherry workflow: warning: {str(exc).replace('invalid config: ', '')} (a dry run plans anyway; "
          "a run needs the data)", file=sys.stderr)

# Jobs call `python` of the environment that runs Snakemake (a virtualenv need not be activated),
# so a job's command line, run in that environment, reproduces the job by hand. An environment
# activated for a job (`--software-deployment-method conda`) comes first on the job's PATH.
envvars:
    "PATH",
    "CHERRY_GRAPHS",


os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
THREADS = config.get("threads", 1)  # Snakemake exports it as OMP_NUM_THREADS of each job
# Experiments whose step times are compared (their runs must not overlap): the experiment table's
# timed phases (cherry.bench.phases.PHASES).
TIMED_EXPERIMENTS = timed_phases()
DATA_ROOT = (config.get("data") or {}).get("root")
# The project's environment for `--software-deployment-method conda` (jobs run in the current
# environment otherwise).
CONDA_ENV = "../../environment.yml"
# Figure -> what draws it: a phase of the experiment table (cherry.bench.phases), or a system whose
# runs of every phase it reads (the estimator: cherry). Its caption: workflow/report/captions/<figure>.rst.
FIGURES = figure_sources()
CAPTIONS = os.path.join(workflow.basedir, "workflow", "report", "captions")


wildcard_constraints:
    run="[A-Za-z0-9_.-]+",
    search="[A-Za-z0-9_.-]+",
    fit="[A-Za-z0-9_.-]+",
    dataset="[A-Za-z0-9_.-]+",
    ordering="metis|random",
    seed="[0-9]+",
    check="[a-z0-9][a-z0-9_-]*",
    figure="|".join(FIGURES),


def record_paths():
    """Every run's record."""
    return [f"results/records/runs/{run}.json" for run in RUNS]


def fitted_record_paths():
    """Every record of a run that trains with a searched setting (its file is named by its spec
    before the fit; the record holds the spec that ran)."""
    return [f"results/records/fitted/{run}.json" for run in FITTED]


def verify_paths():
    """Every gradient-equivalence check's record (`cherry verify --json`)."""
    return [f"results/verify/{check}.json" for check in CHECKS]


def search_paths():
    """Every memory-wall search's record."""
    return [f"results/records/searches/{search}.json" for search in SEARCHES]


def has_runs(what):
    """Whether some run or search belongs to experiment ``what``, or, for a system's name (a figure
    source that is not a phase), whether some run is of that system."""
    if what not in PHASES:
        return any(spec["system"] == what for spec in RUNS.values())
    if PHASES[what].searched:
        return any(search["spec"]["experiment"] == what for search in SEARCHES.values())
    specs = list(RUNS.values()) + [run["spec"] for run in FITTED.values()]
    return any(spec["experiment"] == what for spec in specs)


def figure_caption(wildcards):
    """The report caption of one figure, workflow/report/captions/{figure}.rst (figure.rst shows it)."""
    with open(os.path.join(CAPTIONS, f"{wildcards.figure}.rst"), encoding="utf-8") as f:
        return f.read()


def figure_paths():
    """PNG and PDF of every figure that has runs to draw."""
    names = [name for name, source in FIGURES.items() if has_runs(source)]
    return [f"results/figures/{name}.{ext}" for name in names for ext in ("png", "pdf")]


def data_stamp(dataset):
    return f"results/data/{dataset_slug(dataset)}/info.json"


def ordering_stamp(spec, ordering):
    return f"results/data/{dataset_slug(spec['dataset'])}/ordering-{ordering}-{spec['seed']}.json"


def dataset_name(wildcards):
    """The dataset (a name, or a directory path) behind a ``{dataset}`` wildcard (its slug)."""
    return next((name for name in datasets_used(config) if dataset_slug(name) == wildcards.dataset),
                wildcards.dataset)


def dataset_arg(wildcards):
    return shlex.quote(dataset_name(wildcards))


def run_inputs(wildcards):
    """A run needs its spec, its dataset and, for cherry, its seed ordering computed once."""
    spec = RUNS[wildcards.run]
    inputs = {"spec": f"results/specs/{wildcards.run}.json", "data": data_stamp(spec["dataset"])}
    ordering = needs_ordering(spec)
    if ordering is not None:
        inputs["ordering"] = ordering_stamp(spec, ordering)
    return inputs


def search_inputs(wildcards):
    """A search needs its spec, its dataset and, for cherry, its seed ordering computed once."""
    spec = SEARCHES[wildcards.search]["spec"]
    inputs = {"spec": f"results/specs/{wildcards.search}.json", "data": data_stamp(spec["dataset"])}
    ordering = needs_ordering(spec)
    if ordering is not None:
        inputs["ordering"] = ordering_stamp(spec, ordering)
    return inputs


def fit_inputs(wildcards):
    """A setting search needs its probe spec and its dataset."""
    spec = FITS[wildcards.fit]["spec"]
    return {"spec": f"results/specs/{wildcards.fit}.json", "data": data_stamp(spec["dataset"])}


def fit_options(wildcards):
    """`cherry.bench.fit_setting` options of one setting search."""
    fit = FITS[wildcards.fit]
    return (f"--knob {fit['knob']} --ratio-tolerance {fit['ratio_tolerance']}"
            f" --seed-tolerance {fit['seed_tolerance']}")


def fit_gpus(wildcards):
    return 1 if FITS[wildcards.fit]["spec"]["device"] == "cuda" else 0


def fitted_inputs(wildcards):
    """A fitted run needs its spec, its setting search's record and its dataset."""
    run = FITTED[wildcards.run]
    return {"spec": f"results/specs/{wildcards.run}.json", "fit": f"results/records/fits/{run['fit']}.json",
            "data": data_stamp(run["spec"]["dataset"])}


def fitted_gpus(wildcards):
    return 1 if FITTED[wildcards.run]["spec"]["device"] == "cuda" else 0


def fitted_timed(wildcards):
    """1 for a CPU run of a timed phase (as `run_timed`)."""
    spec = FITTED[wildcards.run]["spec"]
    return 1 if spec["device"] == "cpu" and spec["experiment"] in TIMED_EXPERIMENTS else 0


def search_options(wildcards):
    """`cherry.bench.capacity_run` tolerance options of one search."""
    search = SEARCHES[wildcards.search]
    return f"--ratio-tolerance {search['ratio_tolerance']} --seed-tolerance {search['seed_tolerance']}"


def search_gpus(wildcards):
    return 1 if SEARCHES[wildcards.search]["spec"]["device"] == "cuda" else 0


def spec_text(wildcards):
    """The spec of a run or of a search's start as JSON (a params change re-writes the spec file)."""
    run = wildcards.run
    if run in RUNS:
        spec = RUNS[run]
    elif run in FITTED:
        spec = FITTED[run]["spec"]
    else:
        spec = (SEARCHES[run] if run in SEARCHES else FITS[run])["spec"]
    return json.dumps(spec, indent=2, sort_keys=True)


def report_inputs(wildcards):
    """What figures and the summary read: the run table, the searches, and each dataset's info
    (its training-set size gives steps per epoch)."""
    return {"table": "results/records/runs.csv", "searches": search_paths(),
            "info": [data_stamp(name) for name in datasets_used(config)]}


def run_omp_threads(wildcards):
    """OMP/MKL threads of a run: THREADS per data-parallel rank (cherry.launch splits them among the
    ranks). Set on the run's command line, apart from the cores it claims (`run_threads`)."""
    return THREADS * RUNS[wildcards.run].get("nproc", 1)


def run_threads(wildcards):
    """Cores a run claims. A timed CPU run on this machine claims all of them (Snakemake caps the
    claim at --cores), so that no job runs beside it: its compute threads stay `run_omp_threads`, and
    the spare cores are what a user running the system alone has (cherry's loader and prefetch threads
    use one; Betty's and Buffalo's single-threaded pipelines leave it idle). Measured at adcfede: with
    untimed jobs on the second core, cherry's K=16 step went from 0.28-0.35 s (idle core) to
    0.43-0.50 s while Betty's stayed at 0.53-0.69 s, and two default runs agreed on 8 of 14 verdicts.
    Elsewhere (a cluster) every job has its own allocation and claims only its threads."""
    own = run_omp_threads(wildcards)
    if run_timed(wildcards) and workflow.local_exec:
        return max(own, workflow.global_resources["_cores"].value or own)
    return own


def run_gpus(wildcards):
    """A run's GPUs (one per rank; with `--resources gpu=N` Snakemake runs at most N at once)."""
    return RUNS[wildcards.run].get("nproc", 1) if RUNS[wildcards.run]["device"] == "cuda" else 0


def run_timed(wildcards):
    """1 for a CPU run whose step times are compared (the profile's `timed_runs=1` keeps them apart)."""
    spec = RUNS[wildcards.run]
    return 1 if spec["device"] == "cpu" and spec["experiment"] in TIMED_EXPERIMENTS else 0


def run_priority(wildcards):
    """Repeat 0 of every run first, then repeat 1, ...: repeats interleave across systems instead of
    running back to back, so a slow minute of a shared machine spreads over all systems."""
    return max(0, 100 - RUNS[wildcards.run]["repeat"])


def check_gpus(wildcards):
    return 1 if CHECKS[wildcards.check].get("device") == "cuda" else 0


def check_inputs(wildcards):
    return {"data": data_stamp(CHECKS[wildcards.check]["dataset"])}


def check_arguments(wildcards):
    """`cherry verify` options of one check."""
    return shlex.join(verify_arguments(CHECKS[wildcards.check], DATA_ROOT))


def root_option(wildcards):
    """`--root DIR` of the `cherry data` commands, or nothing for the default data directory or for
    a dataset given by its path (read where it is: `cherry data` refuses --root for it)."""
    if DATA_ROOT is None or ("dataset" in wildcards.keys() and is_dataset_path(dataset_name(wildcards))):
        return ""
    return f"--root {shlex.quote(str(DATA_ROOT))}"


def ordering_root(wildcards):
    return DATA_ROOT


# -- the planner benchmark (workflow/rules/planner.smk) -------------------------------------------
PLANNER = config.get("planner") or {}


def planner_paths():
    """The planner figure (PNG and PDF) when the config has a `planner:` section, else nothing."""
    return [f"results/figures/planner_redundancy.{ext}" for ext in ("png", "pdf")] if PLANNER else []


def planner_data_inputs(wildcards):
    """The dataset stamps of the planner's graphs that are datasets (degree laws need none)."""
    from cherry.data.degree_laws import DEGREE_LAWS

    return [data_stamp(g) for g in PLANNER.get("graphs", []) if g not in DEGREE_LAWS]


def planner_arguments(wildcards):
    """`cherry bench planner` options from config["planner"]."""
    joined = lambda key: ",".join(str(v) for v in PLANNER[key])  # noqa: E731
    args = [f"--graphs {shlex.quote(joined('graphs'))}", f"--num-nodes {PLANNER['num_nodes']}",
            f"--batch-sizes {joined('batch_sizes')}", f"--ks {joined('ks')}", f"--repeats {PLANNER['repeats']}"]
    return " ".join(args + ([root_option(wildcards)] if DATA_ROOT is not None else []))
