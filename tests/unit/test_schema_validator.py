"""cherry.schema_validator against jsonschema on the project's own schemas.

Every schema the engine validates with (run, config as completed at run time, record, each system's
options, each run key's CLI schema) is checked with both validators on a valid document and on
hundreds of mutations of it (every value replaced by wrong ones, every key dropped, an unknown key
added to every object): the same violations (path, keyword, message) and the same best match, hence
the same one-line errors whether or not jsonschema is installed.
"""
from __future__ import annotations

import copy
import random

import pytest

from cherry.schema_validator import UnsupportedSchema, Validator, best_match, unsupported_keywords
from cherry.schemas import _retrieve, load_schema, schema_problem

WRONG = (None, True, -1, 0, 2, 2.0, 1.5, "", "x", "auto", "512MiB", [], [1, 1], [-1, 3], {}, {"zz": 1})


def _schemas() -> dict:
    from cherry.bench.experiments import config_schema
    from cherry.cli.options import spec_properties
    from cherry.systems import system_entry, system_names

    found = {"run": load_schema("run"), "config": config_schema(), "record": load_schema("record")}
    found.update({f"options of {n}": system_entry(n).options_schema() for n in system_names()})
    defs = load_schema("run")["$defs"]
    found.update({f"--{key}": {**prop, "$defs": defs} for key, prop in spec_properties().items()})
    return found


def _documents() -> dict:
    from cherry.bench.record import RunMeasurements, build_record
    from cherry.spec import spec_from_dict
    from cherry.schemas import load_yaml_strict
    from cherry.paths import REPO_DIR

    spec = {"system": "cherry", "dataset": "synth-tiny", "fanouts": [5, 10], "batch_size": 64,
            "num_microbatches": "auto", "budget_bytes": "1GiB", "options": {"ordering": "bfs"}}
    prov = {"git_sha": None, "git_dirty": None, "python_version": "3", "torch_version": "2", "cuda_version": None,
            "dgl_version": None, "pyg_version": None, "ogb_version": None, "device_name": "cpu",
            "device_total_bytes": 1, "native_ext_status": None, "native_ext_used": None, "allocator_conf": None,
            "torch_num_threads": 1, "hostname": "h", "timestamp_utc": "2025-01-01T00:00:00+00:00"}
    record = build_record(spec_from_dict(spec), RunMeasurements(status="oom", reason="x"), prov)
    return {"run": [spec], "record": [record],
            "config": [load_yaml_strict(REPO_DIR / "config" / name) for name in ("config.yaml", "paper.yaml")],
            "options of cherry": [{"ordering": "bfs", "safety": 0.2}]}


def mutations(doc, limit: int = 400):
    """``doc``, then copies with one value replaced (by each of WRONG), one key dropped or one unknown
    key added, at every place in it: ``limit`` of them drawn at random (seeded) where there are more."""
    out = []
    stack = [()]
    while stack:
        path = stack.pop()
        node = doc
        for part in path:
            node = node[part]
        for wrong in WRONG:
            out.append(_replaced(doc, path, lambda _: copy.deepcopy(wrong)))
        if isinstance(node, dict):
            out.append(_replaced(doc, path, lambda d: {**d, "unknown_key": 1}))
            out.extend(_replaced(doc, path, lambda d, k=k: {a: b for a, b in d.items() if a != k}) for k in node)
            stack.extend((*path, k) for k in node)
        elif isinstance(node, list):
            stack.extend((*path, i) for i in range(len(node)))
    return [doc, *random.Random(0).sample(out, min(limit, len(out)))]


def _replaced(doc, path, change):
    if not path:
        return change(copy.deepcopy(doc))
    doc = copy.deepcopy(doc)
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = change(node[path[-1]])
    return doc


def _theirs(validator, instance):
    import jsonschema

    errors = list(validator.iter_errors(instance))
    best = jsonschema.exceptions.best_match(errors)
    found = sorted((tuple(e.absolute_path), e.validator, e.message) for e in errors)
    return found, best and (tuple(best.absolute_path), best.validator, best.message)


def _ours(validator, instance):
    errors = validator.violations(instance)
    best = best_match(errors)
    found = sorted((e.absolute_path, e.keyword, e.message) for e in errors)
    return found, best and (best.absolute_path, best.keyword, best.message)


def test_every_schema_uses_only_supported_keywords():
    for name, schema in _schemas().items():
        assert not unsupported_keywords(schema), (name, unsupported_keywords(schema))


@pytest.mark.slow
def test_same_violations_and_best_match_as_jsonschema():
    jsonschema = pytest.importorskip("jsonschema")
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    registry = Registry(retrieve=lambda uri: Resource.from_contents(_retrieve(uri), DRAFT202012))
    docs = _documents()
    compared = 0
    for name, schema in _schemas().items():
        ours = Validator(schema, retrieve=_retrieve)
        theirs = jsonschema.Draft202012Validator(schema, registry=registry)
        limit = 60 if name == "config" else 400  # jsonschema takes ~0.15 s a config (unevaluatedProperties)
        for instance in [m for d in docs.get(name, []) for m in mutations(d, limit)] or list(WRONG):
            assert _ours(ours, instance) == _theirs(theirs, instance), (name, instance)
            compared += 1
    assert compared > 1000


def test_bad_config_still_refused_without_jsonschema():
    """The schemas' one-line errors come from cherry's validator (no jsonschema import on this path)."""
    problem = schema_problem({"system": "cherry", "dataset": "d", "fanouts": [0]}, "run", "run spec")
    assert problem == "invalid run spec: key fanouts/0: 0 is not valid under any of the given schemas"
    problem = schema_problem({"system": "cherry", "dataset": "d", "hiden": 3}, "run", "run spec")
    assert problem == "invalid run spec: key (top level): Unevaluated properties are not allowed ('hiden' was unexpected)"


def test_an_unsupported_keyword_is_refused_by_name():
    with pytest.raises(UnsupportedSchema, match="'maxItems'"):
        Validator({"type": "array", "maxItems": 1}).violations([1, 2])
    assert unsupported_keywords({"properties": {"a": {"if": {}}}}) == {"if"}
