"""A JSON Schema (draft 2020-12) validator for the keywords Cherry's own schemas use, so that run specs,
configs and records are still checked where the ``jsonschema`` package is absent (the GPU machine).

Contract: for every schema made of `SUPPORTED` keywords, `Validator.violations` finds a violation
exactly where ``jsonschema.Draft202012Validator`` finds an error, with the same message, keyword,
instance path and branch context, and `best_match` picks the same one (tests/unit/test_schema_validator.py
compares the two on the project's schemas). A schema using any other keyword raises
`UnsupportedSchema` naming it, at first use, rather than letting something through unchecked.
"""
from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

# keywords that only annotate (never fail)
ANNOTATIONS = frozenset({"$schema", "$defs", "$comment", "title", "description", "default", "examples"})
SUPPORTED = frozenset({
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "pattern", "items", "minItems", "uniqueItems", "properties", "additionalProperties", "required",
    "minProperties", "propertyNames", "unevaluatedProperties", "oneOf", "anyOf", "$ref",
})
_WEAK = frozenset({"anyOf", "oneOf"})  # a branch error beats "no branch matched" at the same place


class UnsupportedSchema(ValueError):
    """A schema uses a keyword this validator does not implement."""


@dataclass(frozen=True)
class Violation:
    """One failed keyword. ``absolute_path`` locates the instance from the validated document's root;
    ``path`` is its tail below the keyword that holds this one in ``context`` (the whole path for a
    top-level violation). ``context`` holds the branches' violations of a failed oneOf/anyOf."""

    message: str
    keyword: str
    schema: Mapping
    instance: Any
    absolute_path: tuple
    path: tuple
    context: tuple = ()


def unsupported_keywords(schema: Any) -> set[str]:
    """Every keyword of ``schema`` (nested) that is neither `SUPPORTED` nor an annotation."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key not in SUPPORTED and key not in ANNOTATIONS:
                found.add(key)
            if key in ("properties", "$defs"):
                stack.extend(value.values())
            elif key in ("oneOf", "anyOf"):
                stack.extend(value)
            elif key in ("items", "additionalProperties", "unevaluatedProperties", "propertyNames"):
                stack.append(value)
    return found


def is_type(instance: Any, name: str) -> bool:
    """JSON Schema's types as draft 2020-12 reads Python values (bool is no number; 2.0 is an integer)."""
    if name == "integer":
        return (isinstance(instance, int) and not isinstance(instance, bool)) or \
            (isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    kinds = {"string": str, "object": dict, "array": list, "boolean": bool, "null": type(None)}
    if name not in kinds:
        raise UnsupportedSchema(f"type {name!r} is not a JSON Schema type")
    return isinstance(instance, kinds[name])


def _same(one: Any, two: Any) -> bool:
    """JSON equality: True is not 1, recursively in lists and objects."""
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_same(a, b) for a, b in zip(one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_same(one[k], two[k]) for k in one)
    return one == two


def _extras(names: list) -> str:
    return f"{', '.join(map(repr, names))} {'was' if len(names) == 1 else 'were'} unexpected"


class Validator:
    """Validates instances against ``schema``; ``retrieve(name)`` returns the document a reference
    ``<name>#/<pointer>`` names (another schema file), ``#/<pointer>`` resolves in the current document."""

    def __init__(self, schema: Mapping, retrieve: Optional[Callable[[str], Mapping]] = None):
        self.schema = schema
        self.retrieve = retrieve

    def violations(self, instance: Any) -> list[Violation]:
        """Every violation of the schema by ``instance``, in the schema's keyword order."""
        return list(self._check(instance, self.schema, self.schema, (), 0))

    def _resolve(self, ref: str, root: Mapping) -> tuple[Mapping, Mapping]:
        name, _, pointer = ref.partition("#")
        if name:
            if self.retrieve is None:
                raise UnsupportedSchema(f"$ref {ref!r} names another document and no retrieve was given")
            root = self.retrieve(name)
        node: Any = root
        for part in filter(None, pointer.split("/")):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, root

    def _valid(self, instance: Any, schema: Mapping, root: Mapping) -> bool:
        return next(self._check(instance, schema, root, (), 0), None) is None

    def _check(self, instance, schema, root, here: tuple, base: int) -> Iterator[Violation]:
        if schema is True:
            return
        if schema is False:
            yield Violation(f"False schema does not allow {instance!r}", "false", {}, instance, here, here[base:])
            return
        for keyword, value in schema.items():
            if keyword in ANNOTATIONS:
                continue
            check = _KEYWORDS.get(keyword)
            if check is None:
                raise UnsupportedSchema(f"schema keyword {keyword!r} is not supported by cherry.schema_validator "
                                        f"(supported: {', '.join(sorted(SUPPORTED))})")
            for found in check(self, value, instance, schema, root, here, base):
                yield found if isinstance(found, Violation) else \
                    Violation(found, keyword, schema, instance, here, here[base:])

    def _evaluated(self, instance: dict, schema: Any, root: Mapping) -> set:
        """The keys of ``instance`` that ``schema`` evaluates in place (for unevaluatedProperties): its
        properties, the keys valid under additional/unevaluatedProperties, and those of its $ref and of
        its valid oneOf/anyOf branches."""
        if not isinstance(schema, dict):
            return set()
        keys: set = set()
        if "$ref" in schema:
            target, target_root = self._resolve(schema["$ref"], root)
            keys |= self._evaluated(instance, target, target_root)
        if isinstance(schema.get("properties"), dict):
            keys |= schema["properties"].keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if keyword in schema:
                keys |= {k for k, v in instance.items() if self._valid(v, schema[keyword], root)}
        for keyword in ("oneOf", "anyOf"):
            for branch in schema.get(keyword, ()):
                if self._valid(instance, branch, root):
                    keys |= self._evaluated(instance, branch, root)
        return keys


# Each keyword check yields messages (a violation of that keyword here) or Violations (found below).
def _type(v, types, instance, schema, root, here, base):
    types = [types] if isinstance(types, str) else types
    if not any(is_type(instance, t) for t in types):
        yield f"{instance!r} is not of type {', '.join(map(repr, types))}"


def _enum(v, options, instance, schema, root, here, base):
    if not any(_same(option, instance) for option in options):
        yield f"{instance!r} is not one of {options!r}"


def _const(v, const, instance, schema, root, here, base):
    if not _same(const, instance):
        yield f"{const!r} was expected"


def _bound(compare: Callable[[Any, Any], bool], words: str):
    def check(v, limit, instance, schema, root, here, base):
        if is_type(instance, "number") and compare(instance, limit):
            yield f"{instance!r} is {words} {limit!r}"
    return check


def _min_length(v, least, instance, schema, root, here, base):
    if isinstance(instance, str) and len(instance) < least:
        yield f"{instance!r} {'should be non-empty' if least == 1 else 'is too short'}"


def _pattern(v, pattern, instance, schema, root, here, base):
    if isinstance(instance, str) and not re.search(pattern, instance):
        yield f"{instance!r} does not match {pattern!r}"


def _items(v, items, instance, schema, root, here, base):
    if isinstance(instance, list):
        for index, item in enumerate(instance):
            yield from v._check(item, items, root, (*here, index), base)


def _min_items(v, least, instance, schema, root, here, base):
    if isinstance(instance, list) and len(instance) < least:
        yield f"{instance!r} {'should be non-empty' if least == 1 else 'is too short'}"


def _unique_items(v, unique, instance, schema, root, here, base):
    if unique and isinstance(instance, list) and any(
            _same(a, b) for i, a in enumerate(instance) for b in instance[i + 1:]):
        yield f"{instance!r} has non-unique elements"


def _properties(v, properties, instance, schema, root, here, base):
    if isinstance(instance, dict):
        for key, sub in properties.items():
            if key in instance:
                yield from v._check(instance[key], sub, root, (*here, key), base)


def _additional(v, extra_schema, instance, schema, root, here, base):
    if not isinstance(instance, dict):
        return
    if "patternProperties" in schema:
        raise UnsupportedSchema("schema keyword 'patternProperties' is not supported by cherry.schema_validator")
    extras = [k for k in instance if k not in schema.get("properties", {})]
    if isinstance(extra_schema, dict):
        for key in extras:
            yield from v._check(instance[key], extra_schema, root, (*here, key), base)
    elif extra_schema is False and extras:
        yield f"Additional properties are not allowed ({_extras(sorted(extras, key=str))})"


def _required(v, names, instance, schema, root, here, base):
    if isinstance(instance, dict):
        yield from (f"{name!r} is a required property" for name in names if name not in instance)


def _min_properties(v, least, instance, schema, root, here, base):
    if isinstance(instance, dict) and len(instance) < least:
        yield f"{instance!r} {'should be non-empty' if least == 1 else 'does not have enough properties'}"


def _property_names(v, names_schema, instance, schema, root, here, base):
    if isinstance(instance, dict):
        for key in instance:
            yield from v._check(key, names_schema, root, here, base)


def _unevaluated(v, rest_schema, instance, schema, root, here, base):
    if not isinstance(instance, dict):
        return
    seen = v._evaluated(instance, schema, root)
    bad = [k for k in instance if k not in seen and not v._valid(instance[k], rest_schema, root)]
    if bad and rest_schema is False:
        yield f"Unevaluated properties are not allowed ({_extras(sorted(bad, key=str))})"
    elif bad:
        names = ", ".join(map(repr, bad))
        yield (f"Unevaluated properties are not valid under the given schema ({names} "
               f"{'was' if len(bad) == 1 else 'were'} unevaluated and invalid)")


def _branches(v, branches, instance, schema, root, here, base, one: bool):
    errors: list[Violation] = []  # of the branches before the first valid one (all, if none is)
    valid = []
    for branch in branches:
        found = list(v._check(instance, branch, root, here, len(here)))
        if found and not valid:
            errors.extend(found)
        elif not found:
            valid.append(branch)
            if not one:
                break
    if not valid:
        yield Violation(f"{instance!r} is not valid under any of the given schemas", "oneOf" if one else "anyOf",
                        schema, instance, here, here[base:], tuple(errors))
    elif len(valid) > 1:
        yield f"{instance!r} is valid under each of {', '.join(map(repr, [*valid[1:], valid[0]]))}"


def _ref(v, ref, instance, schema, root, here, base):
    target, target_root = v._resolve(ref, root)
    yield from v._check(instance, target, target_root, here, base)


_KEYWORDS = {
    "type": _type, "enum": _enum, "const": _const,
    "minimum": _bound(lambda x, m: x < m, "less than the minimum of"),
    "maximum": _bound(lambda x, m: x > m, "greater than the maximum of"),
    "exclusiveMinimum": _bound(lambda x, m: x <= m, "less than or equal to the minimum of"),
    "exclusiveMaximum": _bound(lambda x, m: x >= m, "greater than or equal to the maximum of"),
    "minLength": _min_length, "pattern": _pattern, "items": _items, "minItems": _min_items,
    "uniqueItems": _unique_items, "properties": _properties, "additionalProperties": _additional,
    "required": _required, "minProperties": _min_properties, "propertyNames": _property_names,
    "unevaluatedProperties": _unevaluated, "$ref": _ref,
    "oneOf": lambda *a: _branches(*a, one=True), "anyOf": lambda *a: _branches(*a, one=False),
}
assert _KEYWORDS.keys() == SUPPORTED


def _matches_type(error: Violation) -> bool:
    types = error.schema.get("type") if isinstance(error.schema, dict) else None
    if types is None:
        return False
    return any(is_type(error.instance, t) for t in ([types] if isinstance(types, str) else types))


def relevance(error: Violation) -> tuple:
    """Sort key of a violation's relevance: shallower first, then earlier siblings, then a keyword other
    than oneOf/anyOf, then one whose schema's type the instance has (as jsonschema ranks them)."""
    return (-len(error.path), error.path, error.keyword not in _WEAK, False, not _matches_type(error))


def best_match(errors: list[Violation]) -> Optional[Violation]:
    """The most relevant violation: the highest by `relevance`, then down a oneOf/anyOf's branch
    violations to the least relevant one while it is unique (the branch that came closest)."""
    best = max(errors, key=relevance, default=None)
    while best is not None and best.context:
        smallest = heapq.nsmallest(2, best.context, key=relevance)
        if len(smallest) == 2 and relevance(smallest[0]) == relevance(smallest[1]):
            return best
        best = smallest[0]
    return best

