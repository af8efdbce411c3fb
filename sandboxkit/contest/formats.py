"""Test cases as contest datasets hold them, read into one shape.

Each dataset stores the same thing, (stdin, expected stdout) pairs, in its own shape; the
shape is recognised from the value itself (a JSON string is decoded first), so a renamed column
still reads. What is supported, per dataset:

- open-r1 (``verification_info``): ``{"language": "python", "test_cases": [{"input": ...,
  "output": ...}, ...]}``; a test case of ``"type": "function_call"`` is call-based.
- APPS / TACO (``input_output``): ``{"inputs": [...], "outputs": [...], "fn_name": ...}``;
  an input or output may be a string or a list of lines. ``fn_name`` marks a call-based
  problem.
- CodeContests (``public_tests``, ``private_tests``, ``generated_tests``): ``{"input": [...],
  "output": [...]}`` each; a row's columns are combined, in that order.
- LiveCodeBench (``public_test_cases``, ``private_test_cases``): a list of ``{"input",
  "output", "testtype"}``, ``testtype`` ``"stdin"`` or ``"functional"`` (call-based; the
  function's name is in the ``metadata`` column's ``func_name``). Its compressed private
  tests (base64 of a zlib-compressed pickle) are not read: unpickling dataset text runs code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

CODECONTESTS_COLUMNS = ("public_tests", "private_tests", "generated_tests")
LIVECODEBENCH_COLUMNS = ("public_test_cases", "private_test_cases")
SINGLE_COLUMNS = ("verification_info", "input_output")
EXPECTED_SHAPES = (
    'open-r1 verification_info {"language", "test_cases": [{"input", "output"}]}; '
    'APPS/TACO input_output {"inputs": [...], "outputs": [...], "fn_name"?}; '
    'CodeContests {"input": [...], "output": [...]}; '
    'LiveCodeBench [{"input", "output", "testtype"}]'
)
"""Named in every error about a value that is none of them."""


@dataclass(frozen=True)
class ContestTests:
    """One row's tests: (stdin, expected stdout) pairs, and what else the row says about them."""

    cases: tuple[tuple[str, str], ...]
    language: str | None = None
    """The language the row names (open-r1's ``language``); None when it names none."""
    calls: tuple[tuple[Any, Any], ...] = ()
    """A call-based row's tests (APPS ``fn_name``, LiveCodeBench ``functional``): (arguments,
    expected result) as the dataset holds them, not decoded further; ``cases`` is then empty."""
    fn_name: str | None = None

    @property
    def call_based(self) -> bool:
        return bool(self.calls)


def _text(value: Any) -> str:
    """A test's input or output as one text: lists of lines are joined, one line each."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(f"{_text(line)}\n" for line in value)
    return str(value)


def _pairs(inputs: Any, outputs: Any, what: str) -> tuple[tuple[Any, Any], ...]:
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(f"{what}: inputs and outputs must be lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"{what}: {len(inputs)} inputs but {len(outputs)} outputs")
    return tuple(zip(inputs, outputs, strict=True))


def _texts(pairs: Sequence[tuple[Any, Any]]) -> tuple[tuple[str, str], ...]:
    return tuple((_text(i), _text(o)) for i, o in pairs)


def parse_tests(value: Any, *, fn_name: str | None = None) -> ContestTests:
    """The tests in one column's value, in any of the shapes above (``fn_name``: a
    LiveCodeBench functional problem's function, from its ``metadata``)."""
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(
                f"test cases are not JSON ({exc}); expected {EXPECTED_SHAPES}"
            ) from exc
    if isinstance(value, Mapping):
        if "test_cases" in value:
            language = value.get("language")
            return replace(parse_tests(value["test_cases"]), language=str(language or "") or None)
        if "inputs" in value and "outputs" in value:
            pairs = _pairs(value["inputs"], value["outputs"], "input_output")
            if value.get("fn_name"):
                return ContestTests((), calls=pairs, fn_name=value["fn_name"])
            return ContestTests(_texts(pairs))
        if "input" in value and "output" in value:
            return ContestTests(
                _texts(_pairs(value["input"], value["output"], "CodeContests tests"))
            )
    if isinstance(value, list) and all(
        isinstance(t, Mapping) and "input" in t and "output" in t for t in value
    ):
        pairs = tuple((t["input"], t["output"]) for t in value)
        if any(
            t.get("testtype") == "functional" or t.get("type") == "function_call" for t in value
        ):
            name = fn_name or next((t["fn_name"] for t in value if t.get("fn_name")), None)
            return ContestTests((), calls=pairs, fn_name=name)
        return ContestTests(_texts(pairs))
    shape = type(value).__name__ + (
        f" with keys {sorted(value)}" if isinstance(value, Mapping) else ""
    )
    raise ValueError(f"test cases of an unknown shape ({shape}); expected {EXPECTED_SHAPES}")


def detect_columns(names: Sequence[str]) -> tuple[str, ...]:
    """The columns holding tests among a dataset's ``names``: all of CodeContests' or
    LiveCodeBench's that are there, else the first of ``verification_info``, ``input_output``."""
    for group in (CODECONTESTS_COLUMNS, LIVECODEBENCH_COLUMNS):
        found = tuple(c for c in group if c in names)
        if found:
            return found
    for column in SINGLE_COLUMNS:
        if column in names:
            return (column,)
    known = ", ".join((*SINGLE_COLUMNS, *CODECONTESTS_COLUMNS, *LIVECODEBENCH_COLUMNS))
    raise ValueError(
        f"no column of test cases among {sorted(names)}; expected one of {known} "
        "(or name it with tests_column=)"
    )


def read_tests(row: Mapping[str, Any], columns: Sequence[str]) -> ContestTests:
    """One row's tests from ``columns`` (their cases combined, in order)."""
    metadata = row.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    fn_name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
    parts = [parse_tests(row[c], fn_name=fn_name) for c in columns if row[c] is not None]
    if not parts:
        raise ValueError(f"no test cases in columns {list(columns)}")
    return ContestTests(
        tuple(case for p in parts for case in p.cases),
        language=next((p.language for p in parts if p.language), None),
        calls=tuple(call for p in parts for call in p.calls),
        fn_name=next((p.fn_name for p in parts if p.fn_name), None),
    )
