"""Benchmarking: run specs, runner, measurement, records, figures, report."""
