"""A Python cell with the variables of the cells before it, run inside a sandbox.

Shipped as source (``python3 -I -c <this file> <state dir>``, the cell's code on stdin), with
``cloudpickle`` copied into ``<state dir>/lib``. No process outlives an exec on every backend,
so the kernel is not a long-lived process: each cell loads the namespace the previous one
saved, runs, and saves it again, which gives a notebook's semantics (variables, functions,
classes and imports persist) without a process that could outlive its exec. What cannot be
pickled (open files, sockets, threads, generators) is dropped with a note the model reads;
a cell that times out is killed before it saves, so its changes are lost.

The state lives in the sandbox and is only ever loaded there: a model that tampers with it
changes its own interpreter, nothing the host trusts (rewards are judged elsewhere).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import pickle
import sys
import traceback
import types

STATE = "state.pickle"
MAX_STATE_BYTES = 64 << 20
"""A namespace larger than this pickled is not kept (a note says so)."""
CELL = "<cell>"


def restore(path: str, namespace: dict[str, object], notes: list[str]) -> None:
    """Load what the last cell saved (with :mod:`pickle`: cloudpickle's output imports
    cloudpickle itself where it needs it, which most states do not)."""
    try:
        with open(path, "rb") as f:
            saved = pickle.load(f)
    except FileNotFoundError:
        return
    except Exception as exc:  # a tampered or unreadable state: start afresh, and say so
        notes.append(f"the variables of earlier calls could not be restored ({exc!r})")
        return
    for name, module in saved.get("modules", {}).items():
        try:
            namespace[name] = importlib.import_module(module)
        except Exception as exc:
            notes.append(f"could not re-import {module} as {name} ({exc!r})")
    namespace.update(saved.get("values", {}))


def kept(namespace: dict[str, object]) -> dict[str, object]:
    return {
        name: value
        for name, value in namespace.items()
        if not (name.startswith("__") and name.endswith("__"))
    }


def plain(state: dict[str, object]) -> bytes | None:
    """``state`` pickled by the standard pickler, if that is enough: nothing in it refers to
    what the cells defined (``__main__``), which only cloudpickle pickles by value (and which
    takes longer to import than most cells take to run)."""
    try:
        data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return None if b"__main__" in data else data


def pickled(modules: dict[str, str], values: dict[str, object], notes: list[str]) -> bytes:
    """The state as bytes: by the standard pickler where that is enough, else by cloudpickle,
    leaving out (with a note) what neither can pickle."""
    state = {"modules": modules, "values": values}
    data = plain(state)
    if data is not None:
        return data
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(state))
    except Exception:  # find what cannot be pickled, keep the rest
        dropped = []
        for name, value in list(values.items()):
            try:
                cloudpickle.dumps(value)
            except Exception:
                dropped.append(f"{name} ({type(value).__name__})")
                del values[name]
        notes.append("not kept for later calls (cannot be pickled): " + ", ".join(dropped))
        return bytes(cloudpickle.dumps(state))


def save(path: str, namespace: dict[str, object], notes: list[str]) -> None:
    names = kept(namespace)
    modules = {n: v.__name__ for n, v in names.items() if isinstance(v, types.ModuleType)}
    values = {n: v for n, v in names.items() if n not in modules}
    data = pickled(modules, values, notes)
    if len(data) > MAX_STATE_BYTES:
        notes.append(
            f"the variables take {len(data) >> 20} MiB pickled (over {MAX_STATE_BYTES >> 20});"
            " they are not kept for later calls"
        )
        data = pickle.dumps({"modules": modules, "values": {}})
    partial = path + ".partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)


def run_cell(code: str, namespace: dict[str, object]) -> bool:
    """As a notebook runs a cell: statements, then the value of a final expression shown.
    Whether it ran without raising."""
    try:
        tree = ast.parse(code, CELL)
    except (SyntaxError, ValueError):  # ValueError: a NUL in the code (before Python 3.12)
        traceback.print_exc(limit=0)
        return False
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    try:
        exec(compile(tree, CELL, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, CELL, "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                print(repr(value))
    except SystemExit as exc:
        print(f"[the code called exit({exc.code!r})]")
        return exc.code in (None, 0)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
            tb = tb.tb_next  # from the cell's own frames on
        traceback.print_exception(type(exc), exc, tb)
        return False
    return True


def main() -> None:
    state_dir = os.path.abspath(sys.argv[1])
    sys.path.insert(0, os.path.join(state_dir, "lib"))
    code = sys.stdin.read()
    os.dup2(1, 2)  # one stream, in the order the model would see it in a terminal
    sys.stderr = sys.stdout
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.path.insert(1, os.getcwd())  # the files the model wrote import, as in a notebook
    notes: list[str] = []
    path = os.path.join(state_dir, STATE)
    restore(path, namespace, notes)
    ok = run_cell(code, namespace)
    try:
        save(path, namespace, notes)
    except Exception as exc:
        notes.append(f"the variables could not be saved for later calls ({exc!r})")
    for note in notes:
        print(f"[note: {note}]")
    sys.stdout.flush()
    os._exit(0 if ok else 1)  # threads the cell left running end with it, as at a cell's interrupt


if __name__ == "__main__":
    main()
