"""Benchmarking: run specs, runner, measurement, records, aggregation (figures and report elsewhere).

- `cherry.bench.spec`: `RunSpec`, `load_spec`, `spec_from_dict`, `spec_id` (schema: run.schema.yaml).
- `cherry.bench.system`: the `System` interface, `SystemConfig`, `StepOutcome`, `SystemUnavailable`.
- `cherry.bench.systems`: `get_system(name)`, `SYSTEM_NAMES` (cherry + baselines, imported lazily).
- `cherry.bench.measure`: `TimingProbe` (phase times), `RunPeakMemory`, `summarize`.
- `cherry.bench.record`: `build_record`, `validate_record`, `write_record` (schema: record.schema.yaml).
- `cherry.bench.run`: ``python -m cherry.bench.run --spec SPEC.json --out RECORD.json`` (one run).
- `cherry.bench.aggregate`: ``collect_records`` and the CSV/Parquet CLI.

Nothing is imported here, so ``import cherry.bench`` stays cheap.
"""
