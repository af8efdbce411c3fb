"""The trusted test runner that runs inside a sandbox (standard library only).

Shipped as source (``python3 -I -c <this file>``) and also imported by the host for its data
codec, so both ends share one definition of the wire format.

Why it is shaped like this: model-written code must not be able to raise its own score. The
candidate never runs in the process that judges it.

- The judge (this process, T) reads the exec's verdict key, then the candidate's code, makes
  itself non-dumpable and forks a zygote (Z) *before* reading any test; the key is read into
  memory no fork inherits, and T forks nothing else (but a fresh interpreter for a zygote
  started afresh, below, which it execs at once: nothing of T's memory reaches it). Neither
  Z nor its children can read T's memory, open T's file descriptors through /proc, or ptrace
  it. Where the sandbox maps a judge's uid (a root host: ``sandboxkit.local.judge``), T takes
  it before it forks Z, and Z takes the candidate's back (a fresh zygote starts with it): no
  process of the candidate's can signal T or change its limits, whatever a filter allows.
- Z never runs the candidate's code while it is a zygote, so what it tells T is true: it
  compiles the code once (and imports the standard modules it names) and forks a child (C)
  on request. In a job that ends at its first failure (all-or-nothing scoring), Z becomes
  the first test's C itself instead (a fork and a process fewer per completion), closing its
  socket to T first; should a passing test then need a fresh C (its process's threads worked
  on past it: :class:`Threads`), T starts a zygote afresh (:func:`restart_zygote`: a new
  interpreter that runs the runner's own code object, with the candidate's ids). C installs
  the no-process filter (:func:`forbid_processes`), then loads the candidate
  (:func:`load_candidate`, the one place its module code first runs) and answers the tests'
  calls over a private socket, test after test, until a test in which it does not answer
  every request with a value; then T ends it and the next test gets a fresh C (a fork per
  test would be most of a call-heavy row's cost, and buys nothing while C only returns
  values: :func:`run_loaded`). T sends C one request at a time, each once the one before is
  answered, so no process of the candidate's holds a test's arguments before it has
  answered the tests before it (:class:`Channel`). A program runs in a fresh C per test, with
  that socket as its stdin and stdout. All of a test's candidate work is C's and its
  threads': the test's clock is C's CPU time from where the previous test's clock stopped
  (the end of its load, which has an allowance of its own, for a fresh C), and no thread
  that worked during a test lives on into the next, nor one from the load without bringing
  what it used there into the first test (:class:`Threads`). What C says is
  the candidate's word: bounded, and deciding nothing but its own verdict. C's answers cross
  as plain data
  (exact types: an ``int`` subclass with a lying ``__eq__`` arrives as an opaque reference),
  so the tests, running in T with their own builtins, compare real values. Everything C
  sends is data that T checks: the names C reports bind only where a test refers to them (a
  test's builtins and its own names stay its own, and so do the names a continued prompt
  defines), a module only under its own name, a standard one that the test names (T imports
  nothing the candidate names, and leaves its working directory once Z has it).
  A whole program ends in C as ``python3`` ends a script (threads joined, ``atexit``, flush);
  Z, its parent, sends T its exit status and peak memory over a socket C never holds, and T
  records the test only then, so a thread that never ends runs into the time limit.
- A program in another language: T checks the sandbox's tools and disk and writes the source
  into a directory of this run's own (what fails there is the sandbox's: only T says so), Z
  runs its compiler once (under the compile limits), and each C execs the result under the
  test's limits (``RLIMIT_DATA`` for memory, a large stack), so nothing of Z's memory
  reaches it.
- Every record T writes is sealed with the key (keyed BLAKE2b): whatever else reaches the
  exec's stdout, a process the candidate started included, is ignored by the host. Records
  fit the exec's output cap by construction (:class:`Reporter`).
- Where the job holds the expected results of its calls (``expect``), T judges each (and
  ends a job that ends at its first failure at the first wrong one); it holds them as it
  holds the key, and no process of the candidate's ever does.
- A test's time limit is CPU time of its process, so a loaded machine does not fail a
  correct program; a wall-clock backstop (``WALL_FACTOR`` times it) ends one that sleeps.
  Where a batch deadline gives the run less time than its tests' limits could need
  (``RUN_WALL_ENV``), T stops it before its end and says whether the program kept the pace
  of its CPU limits (:func:`cut`).

Protocol. stdin: the key in hex and a newline, then frames, each ``<decimal length>\\n<JSON>``:
first ``{"code", "setup", "kind"}``, then the job ``{"kind": "asserts"|"calls"|"stdio",
"timeout", "count", ...}``, then its ``count`` tests (``ITEMS``), one frame each (a job of
calls with ``expect``: then each call's expected result, one frame each). stdout: sealed
lines (``<mac> <JSON>``) of records (``{"records": [...]}``), the last ``{"done": true}``; a
record of ``values`` stands for the calls from its ``test`` on that returned them, one
``through`` another test for the tests from its own to that one, which passed.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import functools
import json
import json.scanner
import math
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
import types
from _blake2 import blake2b  # hashlib's own, without hashlib's imports in every run

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's imports would slow every run; annotations are never evaluated
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, TypeAlias

    JSON: TypeAlias = Any
    """JSON-able data as the codec produces it."""
    Record: TypeAlias = dict[str, Any]
    Names: TypeAlias = dict[str, dict[str, Any]]
    Env: TypeAlias = dict[str, str]
    Instruction: TypeAlias = tuple[int, int, int | str | None, int | str | None]
    """A seccomp filter's (opcode, operand, where it jumps if true, where if false): a value
    of its returns, the name of a labelled instruction, or None (the next one)."""

MAX_FRAME = 64 * 1024 * 1024
"""Bytes of one frame at most: a result whose encoding is longer fails its test, saying so."""
MAX_DEPTH = 64
MAX_ITEMS = 100_000
CANDIDATE_MODULE = "__sandboxkit_candidate__"
KEY_BYTES = 32
WALL_FACTOR = 5
"""A test may take this many times its time limit in wall-clock time (sleeping, blocking, or
starved of CPU) before it is stopped."""
MAX_RECORD = 600
"""Bytes of one record's JSON at most (its detail is shortened to fit)."""
INLINE_VALUE = 256
"""A returned value whose encoding is longer crosses to the host as a digest."""
DIGEST_BYTES = 16
"""Of a long value's digest: a value that is not the expected one matches it by chance one
time in 2**128 (its sender never sees the expected value)."""
OUTPUT_CAP = 1 << 20
"""Bytes of an exec's stdout that every backend keeps (its default output cap): a run's
records fit in it by construction, whatever the candidate returns or prints."""
RECORDS_BUDGET = 224 * 1024
"""Bytes that the records of a run's tests share: each record's share (:func:`record_limit`)
bounds what the candidate sets in it (a detail's length, a value sent inline)."""
MIN_RECORD = 125
"""Bytes of a record's JSON that its share never goes below: the longest record without a
text (a program's exit status, peak memory and output digest, at the last test's index)
fits in it."""
MAX_TESTS = 8192
"""Tests of one row at most: so many records of their shares still fit the exec's output cap
(:func:`spare`)."""
LINE_BYTES = 2 * DIGEST_BYTES + len(' {"records": [') + len("]}\n")
"""Bytes of a line of records besides the records: its seal, the list, its end."""
MARGIN = 1024
"""Bytes of the output cap kept free of every share (the last record, ``done``)."""


def record_limit(tests: int) -> int:
    """Bytes of one record's JSON at most, in a run of ``tests`` tests."""
    return max(MIN_RECORD, min(MAX_RECORD, RECORDS_BUDGET // max(tests, 1)))


def spare(tests: int) -> int:
    """Bytes of the output cap that no record of a run of ``tests`` tests is promised: what a
    record holds beyond its share (a program's output for a checker on the host), and each
    line written before it holds ``Reporter.LINE`` records, come out of it."""
    lines = -(-tests // Reporter.LINE) + 2  # the last, and a load error's
    return OUTPUT_CAP - MARGIN - tests * (record_limit(tests) + 2) - lines * LINE_BYTES


# -- the data codec: plain values only, exact types ---------------------------------------------


class CodecError(ValueError):
    pass


class Ref:
    """An object that stayed on the candidate's side; equal only to itself."""

    __slots__ = ("channel", "ref")

    def __init__(self, ref: int, channel: Channel | None = None) -> None:
        self.ref = ref
        self.channel = channel

    def __repr__(self) -> str:
        return f"<candidate object #{self.ref}>"

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Ref.__slots__:
            object.__setattr__(self, name, value)
        elif self.channel is None:
            raise AttributeError(name)
        else:
            self.channel.request({"setattr": self.ref, "name": name, "args": (value,)})

    def __getattr__(self, name: str) -> Any:
        if self.channel is None or name.startswith("__"):
            raise AttributeError(name)
        return self.channel.request({"getattr": self.ref, "name": name})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.channel is None:
            raise TypeError("a candidate object cannot be called here")
        return self.channel.request({"call": self.ref, "args": args, "kwargs": kwargs})


_ITERATORS: tuple[type, ...] = (
    types.GeneratorType,
    map,
    filter,
    zip,
    enumerate,
    reversed,
    type(iter([])),
    type(iter(())),
    type(iter("")),
    type({}.keys()),
    type({}.values()),
    type({}.items()),
)


_WIDE = 1 << 64
"""Integers this large or larger cross in hex: decimal text of over 4300 digits is refused by
Python's parsing guard (and takes quadratic time), hex is not."""
_STANDARD = dict.fromkeys(("Counter", "OrderedDict", "defaultdict", "deque"), "collections")
_STANDARD.update(Decimal="decimal", Fraction="fractions")
"""Standard types that cross as themselves (exactly these: a subclass is reduced to its base,
as for builtins), by the module that defines them; none is imported to send a value."""


def encode(value: Any, refs: list[Any] | None = None, depth: int = 0) -> JSON:
    """To JSON-able data. Objects that are not plain data become references (into ``refs``)."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    # Subclasses of builtins are reduced to their builtin value through the builtin's own
    # methods, so an overridden __eq__, __str__ or __iter__ never reaches the judge.
    t = type(value)
    if value is None or t is bool or t is str or (t is int and -_WIDE < value < _WIDE):
        return value  # exactly a plain type: itself (the commonest values first)
    if t is list:
        return _items(list.__iter__(value), refs, depth + 1)
    if t is tuple:
        return {"$t": _items(tuple.__iter__(value), refs, depth + 1)}
    if isinstance(value, int):
        whole = int.__int__(value)
        return whole if -_WIDE < whole < _WIDE else {"$i": hex(whole)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"$f": repr(number)}
    if t.__name__ in _STANDARD:
        standard = _encode_standard(value, t, refs, depth)
        if standard is not None:
            return standard
    if isinstance(value, list):
        return _items(list.__iter__(value), refs, depth + 1)
    if isinstance(value, tuple):
        items = _items(tuple.__iter__(value), refs, depth + 1)
        fields = getattr(t, "_fields", None) if t is not tuple else None
        if type(fields) is tuple and all(type(f) is str for f in fields):
            return {"$nt": [t.__name__, list(fields), items]}  # a namedtuple
        return {"$t": items}
    if isinstance(value, (set, frozenset)):
        items = [
            encode(v, refs, depth + 1)
            for v in (set.__iter__(value) if isinstance(value, set) else frozenset.__iter__(value))
        ]
        return {"$s" if isinstance(value, set) else "$fs": items}
    if isinstance(value, dict):
        return {
            "$d": [
                [encode(k, refs, depth + 1), encode(v, refs, depth + 1)]
                for k, v in dict.items(value)
            ]
        }
    if isinstance(value, (bytes, bytearray)):
        data = base64.b64encode(bytes(memoryview(value))).decode()
        return {"$b" if isinstance(value, bytes) else "$ba": data}
    if t is complex:
        return {"$c": [encode(value.real), encode(value.imag)]}
    if t is range:
        return {"$r": [value.start, value.stop, value.step]}
    name = getattr(value, "__name__", None)
    if isinstance(name, str) and getattr(builtins, name, None) is value:
        return {"$bi": name}  # int, len, ...: passed by name
    if t is Ref:
        return {"$ref": value.ref}
    if isinstance(value, _ITERATORS):
        produced: list[JSON] = []
        for item in iter(value):  # type: ignore[call-overload]
            if len(produced) >= MAX_ITEMS:
                raise CodecError("iterator too long")
            produced.append(encode(item, refs, depth + 1))
        return {"$it": produced}
    if refs is None:
        raise CodecError(f"cannot send a {t.__name__}")
    refs.append(value)
    return {"$ref": len(refs) - 1}


def _items(values: Iterator[Any], refs: list[Any] | None, depth: int) -> list[JSON]:
    """A list's or tuple's items encoded, those of exactly a plain type that crosses as itself
    (a string, a finite float, an int that crosses as a number) taken as they are (no call
    per number of a long list)."""
    shallow = depth <= MAX_DEPTH  # else each item fails in encode
    return [
        v
        if shallow
        and (
            (t := type(v)) is str
            or t is bool
            or v is None
            or (t is int and -_WIDE < v < _WIDE)
            or (t is float and v - v == 0.0)
        )
        else encode(v, refs, depth)
        for v in values
    ]


def _encode_standard(value: Any, t: type, refs: list[Any] | None, depth: int) -> JSON:
    """A value of exactly one of the ``_STANDARD`` types, else None. A ``defaultdict``'s
    factory crosses when it is a builtin (``int``, ``list``), else as None (equality ignores
    it)."""
    name = t.__name__
    if getattr(sys.modules.get(_STANDARD[name]), name, None) is not t:
        return None
    if name == "Decimal":
        return {"$dec": str(value)}
    if name == "Fraction":
        return {"$fr": [encode(value.numerator), encode(value.denominator)]}
    if name == "deque":
        return {"$dq": [[encode(v, refs, depth + 1) for v in value], value.maxlen]}
    pairs = [[encode(k, refs, depth + 1), encode(v, refs, depth + 1)] for k, v in value.items()]
    if name == "OrderedDict":
        return {"$od": pairs}
    if name == "Counter":
        return {"$ctr": {"$d": pairs}}
    factory = value.default_factory
    builtin = factory is not None and getattr(builtins, factory.__name__, None) is factory
    return {"$dd": [{"$bi": factory.__name__} if builtin else None, {"$d": pairs}]}


_PLAIN = frozenset((type(None), bool, int, str, float))
"""JSON's types that decode as themselves."""
_TAGS: dict[str, Callable[[Any, Callable[[Any], Any]], Any]] = {
    "$s": lambda v, d: {d(x) for x in v},
    "$fs": lambda v, d: frozenset(d(x) for x in v),
    "$d": lambda v, d: {d(k): d(x) for k, x in v},
    "$b": lambda v, d: base64.b64decode(v),
    "$ba": lambda v, d: bytearray(base64.b64decode(v)),
    "$c": lambda v, d: complex(d(v[0]), d(v[1])),
    "$r": lambda v, d: range(*v),
    "$it": lambda v, d: iter([d(x) for x in v]),
    "$bi": lambda v, d: _builtin(v),
    "$f": lambda v, d: float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[v]),
    "$i": lambda v, d: int(_text(v), 16),
    "$ctr": lambda v, d: _standard("collections", "Counter")(_dict(d(v))),
    "$od": lambda v, d: _standard("collections", "OrderedDict")((d(k), d(x)) for k, x in v),
    "$dd": lambda v, d: _standard("collections", "defaultdict")(
        None if v[0] is None else _builtin(v[0]["$bi"]), _dict(d(v[1]))
    ),
    "$dq": lambda v, d: _standard("collections", "deque")([d(x) for x in v[0]], v[1]),
    "$dec": lambda v, d: _decimal(_text(v)),
    "$fr": lambda v, d: _standard("fractions", "Fraction")(_int(d(v[0])), _int(d(v[1]))),
}
MAX_NAMEDTUPLES = 1024
"""Namedtuple classes the values of one completion may make, in each process decoding them."""


class NamedTuples:
    """The namedtuple classes made in decoding one completion's values, one per name and
    fields (what crosses is the name, the fields and the values, never the sender's class):
    a completion's values spend a budget of their own, never one that another's need.

    ``real``: classes of ``collections.namedtuple``, in the sandbox, where a test reads a field
    by its name. The host only compares values (``strict_equal`` reads a class's name and
    ``_fields``), and gets tuple classes of that name and ``_fields`` alone: a namedtuple
    compiles the names of its fields, and CPython 3.12 and later keep the names a compile
    interns for the rest of the process (the host judges millions of completions)."""

    __slots__ = ("made", "real")

    def __init__(self, real: bool = False) -> None:
        self.made: dict[tuple[str, tuple[str, ...]], type] = {}
        self.real = real

    def make(self, name: Any, fields: Any, items: Iterable[Any]) -> tuple[Any, ...]:
        """A value of the class of ``name`` and ``fields`` (made here at its first value)."""
        key = (_text(name), tuple(_text(f) for f in fields))
        cls = self.made.get(key)
        if cls is None:
            if len(self.made) >= MAX_NAMEDTUPLES:
                raise CodecError("too many namedtuple types")
            if self.real:
                cls = _standard("collections", "namedtuple")(*key)
            else:
                cls = type(key[0], (tuple,), {"__slots__": (), "_fields": key[1]})
            self.made[key] = cls
        value: tuple[Any, ...] = tuple.__new__(cls, items)
        if len(value) != len(key[1]):
            raise CodecError(f"{len(value)} values for the fields {key[1]}")
        return value


NAMEDTUPLES = NamedTuples(real=True)
"""This process's, in the sandbox: a process there is one completion's."""


def _standard(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), name)


def _text(value: Any) -> str:
    if type(value) is not str:
        raise CodecError(f"not text: {value!r}")
    return value


def _int(value: Any) -> int:
    if type(value) is not int:
        raise CodecError(f"not an integer: {value!r}")
    return value


def _dict(value: Any) -> dict[Any, Any]:
    if type(value) is not dict:
        raise CodecError(f"not a dict: {value!r}")
    return value


def _decimal(text: str) -> Any:
    number = _standard("decimal", "Decimal")(text)
    if number.is_snan():  # comparing one raises
        raise CodecError("a signalling NaN")
    return number


PURE_BUILTINS = frozenset(
    (
        *("abs", "all", "any", "ascii", "bin", "callable", "chr", "divmod", "format", "hash"),
        *("hex", "id", "isinstance", "issubclass", "iter", "len", "max", "min", "next", "oct"),
        *("ord", "pow", "repr", "round", "sorted", "sum"),
    )
)
"""The builtin functions a value may name besides the builtin types: those that compute and
do nothing else. A value is data whoever holds it, and the judge may call it (a
``defaultdict``'s factory on a missing key): none that reads, writes, imports or runs text."""


def _builtin(name: str) -> Any:
    value = getattr(builtins, _text(name))
    if not (isinstance(value, type) or name in PURE_BUILTINS):
        raise CodecError(f"not a builtin: {name}")
    return value


def decode(
    data: JSON,
    channel: Channel | None = None,
    refs: list[Any] | None = None,
    namedtuples: NamedTuples | None = None,
) -> Any:
    """From JSON-able data; builds only plain values (and references), never runs code.
    ``namedtuples``: the classes made so far for the completion whose values these are
    (:data:`NAMEDTUPLES` in the sandbox; one per judged run on the host); None: this value's
    own."""
    made = NamedTuples() if namedtuples is None else namedtuples
    items = data.get("$t") if type(data) is dict and len(data) == 1 else None
    if type(items) is list:  # a call's arguments, most often plain or lists of plain items:
        plain = []  # taken with no call per item
        for item in items:
            t = type(item)
            if t in _PLAIN:
                plain.append(item)
            elif t is list and _PLAIN.issuperset(map(type, item)):
                plain.append(item[:])
            else:
                break
        else:
            return tuple(plain)

    def d(x: JSON) -> Any:
        t = type(x)
        if t in _PLAIN:
            return x
        if t is list:  # plain items taken as they are: no call per number of a long list
            return [v if type(v) in _PLAIN else d(v) for v in x]
        if t is dict and len(x) == 1:
            ((tag, v),) = x.items()
            if tag == "$t":
                return tuple(d(v) if type(v) is list else v)
            if tag == "$ref":
                if refs is not None:
                    return refs[v]
                return Ref(v, channel)
            if tag == "$nt":
                return made.make(v[0], v[1], [d(x) for x in v[2]])
            if tag in _TAGS:
                return _TAGS[tag](v, d)
        raise CodecError(f"not a value: {x!r}")

    try:
        return d(data)
    except (
        TypeError,
        KeyError,
        IndexError,
        ValueError,
        ArithmeticError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise CodecError(f"bad value: {exc}") from None


# -- framing ----------------------------------------------------------------------------------


def _unjsonable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_SCANNER = getattr(json.scanner, "c_make_scanner", None)
_ENCODE = (
    _C_ENCODER(None, _unjsonable, json.encoder.encode_basestring_ascii, None, ": ", ", ", 0, 0, 1)
    if _C_ENCODER is not None
    else None
)
_SCAN = _C_SCANNER(json.JSONDecoder()) if _C_SCANNER is not None else None


def dumps(obj: Any) -> str:
    """``json.dumps(obj)``, the same text, without its set-up on every call (a frame's or a
    record's, thousands a run): the C encoder made once. Data here is acyclic (the codec's,
    or JSON read): a cycle is a ``RecursionError``, not ``json.dumps``'s ``ValueError``."""
    if _ENCODE is None:
        return json.dumps(obj)
    return "".join(_ENCODE(obj, 0))


def loads(data: bytes | bytearray) -> Any:
    """One JSON value, exactly the whole of ``data`` (UTF-8), as ``json.loads`` reads it,
    without its set-up on every call: the C scanner made once (any other text is a
    ``ValueError``)."""
    if _SCAN is None:
        return json.loads(data)
    text = data.decode()
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("not one JSON value")
    return value


def read_some(fd: int, n: int, clock: Clock | None) -> bytes:
    """Up to ``n`` bytes from ``fd`` (b"" at its end); with a ``clock``, from a descriptor
    whose reads do not block, or stop waiting after a while (``SO_RCVTIMEO``), waiting on the
    clock whenever there is nothing to read yet."""
    while True:
        try:
            return os.read(fd, n)
        except BlockingIOError:
            if clock is None:
                raise
            clock.wait([fd])


def read_exact(fd: int, n: int, clock: Clock | None = None) -> bytes:
    chunks = []
    while n:
        chunk = read_some(fd, min(n, 1 << 20), clock)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, limit: int = MAX_FRAME, clock: Clock | None = None) -> Any:
    """One ``<length>\\n<JSON>`` frame of at most ``limit`` bytes, read unbuffered: nothing
    beyond it leaves the pipe. With a ``clock`` (a frame from a candidate's process, on a
    non-blocking socket), reads wait on it: a frame begun and never finished runs into the
    test's time limit."""
    header = b""
    while not header.endswith(b"\n"):
        byte = read_some(fd, 1, clock)
        if not byte or len(header) > 12:
            raise EOFError
        header += byte
    size = int(header)
    if size > limit:
        raise CodecError("frame too large")
    return loads(read_exact(fd, size, clock))


class Frames:
    """``<length>\\n<JSON>`` frames from one descriptor, read in chunks: a frame costs one
    read rather than one per header byte, and what follows it stays in this reader, as it
    would have stayed in the descriptor, for the next. For a socket that only its two ends
    hold (T's to a test's process, and that process's own end), and for stdin once nothing
    is left to fork that must not hold what follows. With a ``clock`` (frames from a
    candidate's process, on a non-blocking socket), reads wait on it: a frame begun and never
    finished runs into the test's time limit."""

    CHUNK = 1 << 16

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.fills = 0
        """Reads from the descriptor so far (a frame read with none since came with the
        frame before it)."""

    def ready(self) -> bool:
        """Whether a whole frame of at most ``MAX_FRAME`` bytes waits in this reader (the next
        read needs no system call); False for what begins no frame (reading it says so)."""
        buffer = self.buffer
        newline = buffer.find(b"\n", 0, 13)
        try:
            size = int(buffer[:newline]) if newline >= 0 else -1
        except ValueError:
            return False
        return 0 <= size <= MAX_FRAME and len(buffer) > newline + size

    def read(self, limit: int = MAX_FRAME, clock: Clock | None = None) -> Any:
        return loads(self.raw(limit, clock))

    def raw(self, limit: int = MAX_FRAME, clock: Clock | None = None) -> bytes:
        """The next frame's JSON text, unread."""
        buffer = self.buffer
        newline = buffer.find(b"\n", 0, 13)
        while newline < 0:
            if len(buffer) > 12:
                raise EOFError
            self.fill(self.CHUNK, clock)
            newline = buffer.find(b"\n", 0, 13)
        size = int(buffer[:newline])
        if not 0 <= size <= limit:
            raise CodecError("frame too large")
        end = newline + 1 + size
        while len(buffer) < end:
            self.fill(min(max(end - len(buffer), self.CHUNK), 1 << 20), clock)
        text = bytes(buffer[newline + 1 : end])
        del buffer[:end]
        return text

    def fill(self, n: int, clock: Clock | None) -> None:
        chunk = read_some(self.fd, n, clock)
        if not chunk:
            raise EOFError
        self.buffer += chunk
        self.fills += 1


def frame(obj: JSON) -> bytes:
    return framed(dumps(obj).encode())


def framed(data: bytes) -> bytes:
    """The frame of JSON text ``data``."""
    if len(data) > MAX_FRAME:
        raise CodecError(f"its encoding is {len(data)} bytes, over the limit of {MAX_FRAME}")
    return b"%d\n" % len(data) + data


def call_texts(name: str, calls: Iterable[Iterable[Any]]) -> list[bytes]:
    """The JSON text of ``{"call": name, "args": encode(tuple(args))}`` for each argument tuple
    of ``calls``, as :func:`dumps` writes it: the head made once and no dict per call (a row's
    thousands of calls are most of the host's work on its request). Raises ``CodecError`` as
    :func:`encode` does."""
    head = '{"call": ' + dumps(name) + ', "args": {"$t": '
    return [(head + dumps(_items(iter(args), None, 1)) + "}}").encode() for args in calls]


class RemoteError(Exception):
    """The candidate raised, exited or went silent during a call."""


class TimeUp(TimeoutError):
    """A test ran out of time: ``limit`` says which, its CPU time or the wall-clock backstop."""

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit


class Cut(BaseException):
    """The run reached the wall-clock time the host gave it (:data:`RUN_END`): T stops, and
    says whether the program was keeping the pace its CPU limits allow (not an ``Exception``,
    which a test's ``except`` would take for the candidate's own)."""


RUN_END: list[float] = []
"""T: when (``time.monotonic()``) the run must end, where the host gave it less time than
its tests' limits could need (a batch deadline: ``RUN_WALL_ENV``)."""
RUN_WALL_ENV = "SANDBOXKIT_RUN_WALL"
"""The variable in which the host gives a run its wall-clock seconds, where a batch deadline
cuts it short of its allowance."""
RUN_MARGIN = 1.0
"""Seconds before the host's limit at which T stops a run cut short, to write its records."""


class Clock:
    """A test's time limit, judged in CPU time of the process that runs it (all its threads;
    it may start no processes), so that a loaded
    machine does not fail a correct program; the wall-clock backstop, ``WALL_FACTOR`` times
    the limit, ends a program that sleeps or blocks. The CPU clock is read only when the
    limit could first have been reached, so a quick test never reads it."""

    def __init__(
        self, pid: int, limit: float, wall: float | None = None, base: float = 0.0
    ) -> None:
        self.pid = pid
        self.clock_id = (~pid << 3) | 2  # the process's CPU-time clock (Linux, CPUCLOCK_SCHED)
        self.limit = limit
        self.base = base
        """CPU seconds the process had used before this clock started (its load's)."""
        self.wall = limit * WALL_FACTOR if wall is None else wall
        self.started = time.monotonic()
        self.backstop = self.started + self.wall
        self.check_at = self.started + limit / CPUS

    def rebase(self, used: float) -> None:
        """Become the next test's clock on the same process: based at the CPU time it has
        used by now (``used``, just read), so that no cycle between two tests (a thread's)
        escapes both clocks."""
        self.base = used
        self.started = time.monotonic()
        self.backstop = self.started + self.wall
        self.check_at = self.started + self.limit / CPUS

    def past_backstop(self) -> str:
        return f"still running after {self.wall:g}s of wall-clock time"

    def used(self) -> float | None:
        """CPU seconds the process has used in all; None once it is gone (reaped): what it
        used then is no longer to be had, and it uses no more."""
        try:
            return time.clock_gettime(self.clock_id)
        except OSError:
            return None

    def wait(self, readers: list[Any], writers: list[Any] | None = None) -> list[Any]:
        """Wait until one of ``readers`` or ``writers`` is ready (returns those that are),
        raising :class:`TimeUp` when the time is up (:class:`Cut` at the run's end)."""
        while True:
            now = time.monotonic()
            if now >= self.backstop:
                raise TimeUp("wall", self.past_backstop())
            if RUN_END and now >= RUN_END[0]:
                raise Cut
            if now >= self.check_at:
                used = self.used()
                if used is not None and used - self.base >= self.limit:
                    raise TimeUp("cpu", f"used more than {self.limit:g}s of CPU time")
                left = self.limit if used is None else self.limit - (used - self.base)
                self.check_at = now + max(left / CPUS, 0.01)
            wait = min(self.check_at, self.backstop, *RUN_END) - now
            readable, writable, _ = select.select(readers, writers or [], [], max(wait, 0))
            if readable or writable:
                return readable + writable


CPUS = len(os.sched_getaffinity(0))


class Threads:
    """A candidate process's other threads (all but its first, which answers T), read from its
    ``/proc`` entries, opened when first needed: the CPU they have used. No work may cross
    from one test to the next in a live thread (it would be no test's, or share many tests'
    limits): a process whose other threads worked during a test and live on is ended after
    it. Where the entries cannot be read, every process is taken to have such threads."""

    def __init__(self) -> None:
        self.pid = ""
        """Its directory's name in /proc, as it said before the candidate's code ran (none:
        unreadable)."""
        self.task = self.sched = -2
        """Descriptors of its ``task`` directory and its first thread's ``schedstat`` (-2: not
        opened yet; -1: unreadable)."""
        self.others: float | None = None
        """The CPU seconds its other threads had used, live or ended, when last read (None:
        not read while any lived)."""

    def alive(self) -> bool:
        """Whether a thread besides the first is alive now (the ``task`` directory's links:
        one per thread, and two)."""
        if self.task == -2:
            self.task = self._open(f"/proc/{self.pid}/task", os.O_DIRECTORY)
        try:
            return os.fstat(self.task).st_nlink > 3
        except OSError:
            return True

    def other_cpu(self, used: float) -> float | None:
        """The CPU seconds its other threads have used, given the process's ``used`` (read
        after its first thread's, which can only have grown since: never less than theirs)."""
        if self.sched == -2:
            self.sched = self._open(f"/proc/{self.pid}/schedstat", 0)
        try:
            first = int(os.pread(self.sched, 64, 0).split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return None
        return used - first

    def worked(self, used: float) -> bool:
        """Whether another thread lives now and has used CPU since the last reading (or none
        was read while one lived)."""
        if not self.alive():
            return False
        before, self.others = self.others, self.other_cpu(used)
        return before is None or self.others is None or self.others > before

    def close(self) -> None:
        for fd in (self.task, self.sched):
            if fd >= 0:
                os.close(fd)

    @staticmethod
    def _open(path: str, flags: int) -> int:
        if not path.split("/")[2].isdigit():
            return -1
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
        except OSError:
            return -1


class Channel:
    """T's end of the socket to one candidate child. One request at a time, each sent only
    once the one before is answered: no process of the candidate's holds a test's arguments
    before it has answered the tests before it (whatever reaches its memory, it can read)."""

    def __init__(
        self,
        sock: socket.socket,
        clock: Clock,
        exit_sock: socket.socket | None = None,
        stderr: socket.socket | None = None,
    ) -> None:
        self.sock = sock
        self.frames = Frames(sock.fileno())
        self.clock = clock
        self.exit_sock = exit_sock
        """Where the zygote sends the exit status of a whole program's process."""
        self.stderr = stderr
        """A whole program's stderr (its tail says why it failed)."""
        self.threads = Threads()
        self.names: Names = {}
        """The candidate's names, as its process said when it had loaded the code."""
        self.banned = ""
        """What the candidate's process reached that its task bans, once it said so."""
        self.clean = True
        """Whether every request so far got a value back: false from the first that did not
        (the candidate raised, a ban, a timeout, an answer T could not read, its end). A
        call's short answer is not read here but by the host, which judges one that is no
        value a wrong result, as any other."""

    def request(self, message: dict[str, Any]) -> Any:
        message = dict(message)
        for key in ("args", "kwargs"):
            if key in message:
                message[key] = encode(message[key])
        return self.value(self.exchange(frame(message)))

    def value(self, data: JSON) -> Any:
        """An answer's value; a process whose answer is no value is not clean."""
        self.clean = False
        value = decode(data, channel=self, namedtuples=NAMEDTUPLES)
        self.clean = True
        return value

    def send(self, data: bytes) -> None:
        """Write a request, within the test's backstop: a process that stops reading its
        requests cannot hold the judge (a write waits a tick at most: :func:`child_channel`)."""
        view, fd = memoryview(data), self.sock.fileno()
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                if time.monotonic() >= self.clock.backstop:
                    raise TimeUp("wall", self.clock.past_backstop()) from None
                if RUN_END and time.monotonic() >= RUN_END[0]:
                    raise Cut from None

    def settled(self) -> bool:
        """After a test that got a value for each of its requests: whether this process may
        answer the next test (it lives, and no other thread of its worked during this one to
        live on into the next), whose clock then starts here."""
        used = self.clock.used()
        if used is None or self.threads.worked(used):
            return False
        self.clock.rebase(used)
        return True

    def exchange(self, request: bytes) -> JSON:
        """Send ``request`` (a frame) and wait for its answer on the test's clock: the value
        answered, encoded as the candidate's process sent it (not yet decoded: whoever
        decodes it learns whether it is a value)."""
        return self.taken(self.answer(request))

    def answer(self, request: bytes) -> bytes:
        """Send ``request`` (a frame) and wait for its answer on the test's clock: the
        answer's JSON text, unread (:meth:`taken` reads it)."""
        self.clean = False
        self.send(request)
        try:
            return self.frames.raw(clock=self.clock)
        except TimeUp:
            raise
        except (EOFError, OSError, ValueError):  # OSError: TimeUp's base, kept apart above
            raise RemoteError("the candidate's process ended during a call") from None

    def taken(self, text: bytes) -> JSON:
        """The value of an answer's JSON text; the candidate's exception, a ban it reached,
        or a :class:`RemoteError` where it answered no value."""
        try:
            answer = loads(text)
        except ValueError:
            answer = None
        if type(answer) is not dict:
            raise RemoteError("the candidate's process answered something else than a value")
        if "raise" in answer:
            raise remote_exception(answer, self)
        if "banned" in answer:
            self.banned = banned_detail(answer["banned"])
            raise Banned(self.banned)
        if "ok" not in answer:
            raise RemoteError("the candidate's process answered something else than a value")
        self.clean = True
        return answer["ok"]


def banned_detail(what: Any) -> str:
    return f"reached {str(what)[:200]}, which the task bans"


def remote_exception(answer: Record, channel: Channel) -> Exception:
    """The candidate's exception as a test sees it: of its builtin type, made here from plain
    arguments (a test's ``except ZeroDivisionError`` works), else a :class:`RemoteError`.
    Never ``StopIteration`` (it would end a test's loop as if exhausted) nor what is not an
    ``Exception`` (``SystemExit``)."""
    name = answer.get("type")
    cls = getattr(builtins, name, None) if type(name) is str else None
    if (
        isinstance(cls, type)
        and issubclass(cls, Exception)
        and not issubclass(cls, (StopIteration, StopAsyncIteration))
    ):
        with contextlib.suppress(Exception):
            return cls(*decode(answer.get("args"), channel, namedtuples=NAMEDTUPLES))
    return RemoteError(str(answer["raise"]))


# -- the candidate side (zygote and children) ---------------------------------------------------


def exception_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")[:500]


def raised(exc: BaseException) -> Record:
    """C's answer for an exception: its line, and its nearest builtin type with its arguments
    as plain data (or its message), from which T makes one of its own."""
    builtin = next(c for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c)
    try:
        args = encode(exc.args)
    except (CodecError, RecursionError):
        args = encode((str(exc)[:500],))
    return {"raise": exception_line(exc), "type": builtin.__name__, "args": args}


def serve(sock: socket.socket, namespace: dict[str, Any]) -> None:
    """C: answer calls (and reads of the module's names), one at a time as T sends them,
    until T closes the socket."""
    refs: list[Any] = []
    frames = Frames(sock.fileno())
    while True:
        try:
            request = frames.read()
        except (EOFError, OSError, ValueError):
            os._exit(0)
        try:
            if "call" in request:  # the commonest first
                target = request["call"]
                func = namespace[target] if type(target) is str else refs[target]
                args = decode(request.get("args", {"$t": []}), refs=refs, namedtuples=NAMEDTUPLES)
                kwargs = (
                    decode(request["kwargs"], refs=refs, namedtuples=NAMEDTUPLES)
                    if "kwargs" in request
                    else {}
                )
                result = func(*args, **kwargs)
            elif "getattr" in request:
                result = getattr(refs[request["getattr"]], request["name"])
            elif "setattr" in request:
                (value,) = decode(request["args"], refs=refs, namedtuples=NAMEDTUPLES)
                setattr(refs[request["setattr"]], request["name"], value)
                result = None
            else:
                result = namespace[request["get"]]
            answer = {"ok": encode(result, refs)}
        except BaseException as exc:  # the candidate's own exception, SystemExit included
            answer = raised(exc)
        try:
            text = dumps(answer).encode()
            if len(text) > MAX_FRAME:
                raise CodecError(f"its encoding is over the limit of {MAX_FRAME} bytes")
        except (TypeError, ValueError, RecursionError) as exc:
            text = dumps({"raise": "unsendable result: " + exception_line(exc)}).encode()
        sock.sendall(framed(text))


def describe(namespace: dict[str, Any]) -> Names:
    """What T needs to bind the candidate's names: modules by name, callables and data by
    kind (a test reads the data it refers to over the channel, as the call's result)."""
    names: Names = {}
    for name, value in namespace.items():
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            names[name] = {"module": value.__name__}
        else:
            names[name] = {"callable" if callable(value) else "value": True}
    return names


def load_candidate(sock: socket.socket, compiled: types.CodeType) -> dict[str, Any]:
    """C: the one place where the candidate's module code first runs, in this test's
    process and nowhere else, after :func:`forbid_processes`. T learns how it went (its
    names, or why it failed) from this process: the candidate's word, which T bounds and
    which decides nothing but this candidate's own verdict."""
    namespace = {"__name__": CANDIDATE_MODULE, "__builtins__": __builtins__}
    loaded: Record
    try:
        exec(compiled, namespace)
        loaded = {"loaded": describe(namespace)}
    except BaseException as exc:  # its own exception, SystemExit included
        loaded = {"load_error": exception_line(exc)}
    sock.sendall(frame(loaded))
    if "load_error" in loaded:
        os._exit(0)
    return namespace


def imported_modules(code: str) -> set[str]:
    """The top-level packages of the standard library that the code's ``import`` lines name,
    read as text (a syntax tree's objects cost a fresh zygote more than the compile): the
    zygote imports them once for every test's process (standard library code only, whatever
    the candidate wrote). What this misses, or takes from text that is no import, only moves
    an import to or from each test's process."""
    found: set[str] = set()
    for line in code.splitlines():
        words = line.split("#", 1)[0].replace(",", " ").replace(";", " ").split()
        if words[:1] == ["import"]:
            found.update(word.split(".")[0] for word in words[1:])
        elif words[:1] == ["from"] and len(words) > 1:
            found.add(words[1].split(".")[0])
    return found & STANDARD_MODULES


def preimport(names: set[str]) -> None:
    """Z: import these standard modules from the standard library's own directories only (no
    site-packages: nothing but standard library code runs here), whatever they do."""
    path = sys.path[:]
    sys.path[:] = [p for p in path if not p.endswith(("site-packages", "dist-packages"))]
    try:
        for name in sorted(names):
            with contextlib.suppress(BaseException):
                __import__(name)
    finally:
        sys.path[:] = path


def zygote(
    ctl: socket.socket,
    code: str,
    setup: str,
    program: Record | None,
    run: tuple[list[str], Env] | None,
    bans: Record | None = None,
) -> None:
    """Z: never runs the candidate's code while it is a zygote. It compiles it once (a
    program of another language: runs its compiler), then forks a fresh child on request,
    which loads the candidate (or runs the program) under that test's limits; asked to
    ``become`` the child (:func:`request_child`), it is that child itself, its socket to T
    closed first. With ``bans``, what the task bans is unusable in each child before the
    candidate's first instruction (:func:`enforce_bans`)."""
    native = program.get("native") if program is not None else None
    try:
        if native is not None and program is not None and run is not None:
            compile_native(native, code, program, run[1])
        else:
            text = code if program is not None else code + "\n" + setup
            try:
                compiled = compile(text, "<candidate>", "exec")
            except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
                raise BuildError("compile", f"compile error: {exception_line(exc)}") from None
            # Imported once here rather than in every test's process: what run_program needs
            # (traceback's imports take a few ms, as much as the rest of a test's overhead),
            # what forbid_processes needs, and the standard modules the code imports.
            for name in ("traceback",) if program is not None else ("ctypes", "struct"):
                __import__(name)
            if program is None and not bans and "import" in code:  # a module already
                preimport(imported_modules(text))  # loaded is imported unseen by the bans' hook
        ctl.sendall(frame({"ready": True}))
    except BuildError as exc:  # a compile error (Z meets no other kind)
        ctl.sendall(frame({"load_error": str(exc)[:MAX_RECORD], "build": "compile"}))
        os._exit(0)
    except BaseException as exc:
        ctl.sendall(frame({"load_error": exception_line(exc)}))
        os._exit(0)
    # Children are reaped by the kernel; a program's by report_exit, which needs SIGCHLD's
    # default even where the sandbox started this process with it ignored.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL if program is not None else signal.SIG_IGN)
    fd = ctl.fileno()
    while True:
        try:
            asked = read_frame(fd)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        # T's first request of a job that ends at its first failure: this process becomes
        # that test's (a fork and a process fewer); T starts a fresh zygote if it needs another.
        become = program is None and type(asked) is dict and asked.get("become") is True
        mine, theirs = socket.socketpair()
        # A program's exit status goes to T from here, its parent, over a socket of its own;
        # its stderr over another.
        status_mine = status_theirs = err_mine = err_theirs = None
        if program is not None:
            status_mine, status_theirs = socket.socketpair()
            err_mine, err_theirs = socket.socketpair()
        if become:
            # Its CPU time so far is its own (the compile), read before any of the
            # candidate's runs: T bases the load's clock on it, so none of the load escapes.
            own = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
            said = {"child": os.getpid(), "became": own}
            socket.send_fds(ctl, [frame(said)], [theirs.fileno()])
        pid = 0 if become else os.fork()
        if pid == 0:
            for end in (ctl, theirs, status_mine, status_theirs, err_theirs):
                if end is not None:
                    end.close()
            if program is not None:
                assert err_mine is not None
                limit_program(program)
                if run is not None:
                    exec_program(mine, err_mine, *run)
                run_program(mine, err_mine, compiled)
            # Its entry in /proc, before anything of the candidate's runs (T's own pid for it
            # may name another process there: a warm exec has a pid namespace of its own).
            try:
                proc = os.readlink("/proc/self")
            except OSError:
                proc = ""
            mine.sendall(frame({"proc": proc}))
            forbid_processes()  # all the candidate's work is this process's: none in children
            if bans:  # bans: before the candidate's first instruction (what this frame's
                enforce_bans(bans, mine.fileno())  # code runs from here on is left alone)
            serve(mine, load_candidate(mine, compiled))
        ends = [e for e in (theirs, status_theirs, err_theirs) if e is not None]
        socket.send_fds(ctl, [frame({"child": pid})], [end.fileno() for end in ends])
        for end in (mine, err_mine, *ends):
            if end is not None:
                end.close()
        if status_mine is not None:
            report_exit(pid, status_mine)


# -- bans: what a task forbids, made unusable in the candidate's own process -------------------


class Banned(BaseException):
    """The candidate's process reached what its task bans (T's view of that process's report;
    not an ``Exception``, which a test's ``except`` would take for the candidate's own)."""


BAN_KEYS = ("names", "attributes", "modules")
PROCESS_EVENTS = frozenset(("os.exec", "os.posix_spawn", "os.spawn", "os.system"))
PROCESS_EVENTS |= {"subprocess.Popen", "os.fork", "os.forkpty"}
HEAP_EVENTS = frozenset(("gc.get_objects", "gc.get_referrers", "gc.get_referents"))
UNAUDITED_MODULES = frozenset(("_interpreters", "_xxsubinterpreters", "_testcapi"))
UNAUDITED_MODULES |= {"_testinternalcapi", "_testsinglephase", "_testmultiphase"}
UNAUDITED_MODULES |= {"_posixsubprocess"}
"""Modules that start interpreters (fresh builtins) or processes (another Python), or reach
the interpreter's internals, without an audit event of their own on every version (3.13's
``_interpreters.create`` raises none, ``_posixsubprocess.fork_exec`` none at all)."""


def enforce_bans(bans: Record, report: int) -> None:
    """Just before the candidate's first instruction, in its process: make what the task
    bans (``bans``: the host's AST check's ``names``, ``attributes`` and ``modules``) unusable,
    whatever name or path reaches it. Each banned callable (a builtin, a method of a builtin
    type, a function of a banned module, which is imported first) is replaced by a stub in
    every dictionary that holds it (module and type namespaces, the interpreter's spare copy
    of the builtins), so the original is gone: a call by any name, ``getattr``, ``map``, a
    ``methodcaller``, a key function or a pickle reaches the stub, which reports the ban on
    ``report`` (the socket to T) and ends the process. A stub the candidate rebinds or
    rewrites is its own code: no way back to the original. An audit hook (hooks cannot be
    removed) refuses those ways back and around: importing again or reloading a patched or
    banned module, ``gc``'s walks of the heap, a new interpreter (fresh builtins), a new
    process (another Python), ctypes but for the runner's own seccomp filter, made-up code
    objects; and it checks source compiled at run time (``exec``, ``eval``, a module the
    candidate writes and imports) as the host checks the candidate's code. What the runner's
    own code in this process uses from here on (from the caller on) stays, for the host's
    check alone: ``__import__`` (every import statement calls it) and, say, ``len``."""
    import ast  # noqa: F401 (the hook's, loaded now: its import runs code that sorts)
    import ctypes
    import gc

    names, attributes, modules = (frozenset(bans.get(key) or ()) for key in BAN_KEYS)
    used, codes = runner_reach(sys._getframe(1).f_code)
    used.add("__import__")
    homes = {home for module in modules - used for home in (module, "_" + module)}
    for module in modules - used:
        with contextlib.suppress(Exception):  # no such module here: the host's check's alone
            __import__(module)
    originals: dict[int, tuple[Any, str]] = {}
    for name in (names | attributes) - used:
        value = vars(builtins).get(name)
        if callable(value) and not isinstance(value, type):  # a type is its instances' too
            originals[id(value)] = (value, name)
    owners: list[type] = []
    for klass in builtin_types():
        for name in attributes - used:
            value = klass.__dict__.get(name)
            if callable(value):
                originals[id(value)] = (value, f"{klass.__name__}.{name}")
                owners.append(klass)
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] in homes:
            for name, value in list(vars(module).items()):
                if callable(value) and getattr(value, "__module__", None) in homes:
                    originals[id(value)] = (value, f"{module_name}.{name}")
    stop = ban_stop(report)
    stubs = {key: ban_stub(what, stop) for key, (_, what) in originals.items()}
    patched: set[str] = set()
    gc.unfreeze()  # what a warm template froze is invisible to gc's walks: every holder counts
    for holder in gc.get_referrers(*(value for value, _ in originals.values())):
        if type(holder) is dict and holder is not originals:
            for key, value in list(holder.items()):
                if id(value) in originals and value is originals[id(value)][0]:
                    holder[key] = stubs[id(value)]
                    patched.add(str(holder.get("__name__", "")))
        elif type(holder) is list:
            holder[:] = [stubs.get(id(v), v) for v in holder]
    for klass in owners:  # what lookups and specialized calls cached stands for the original
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(klass))
    originals.clear()
    reloads = frozenset(homes | patched)
    files = {getattr(sys.modules.get(name), "__file__", None) for name in reloads}
    hook = ban_hook(
        stop, reloads, frozenset(filter(None, files)), names | attributes, modules, codes
    )
    sys.addaudithook(hook)


def runner_reach(code: types.CodeType) -> tuple[set[str], tuple[types.CodeType, ...]]:
    """The names the runner's code from ``code`` on uses (following the runner's functions and
    classes it names), and those code objects."""
    namespace = globals()
    used: set[str] = set()
    seen: dict[int, types.CodeType] = {}
    stack = [code]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = current
        used.update(current.co_names)
        stack += [c for c in current.co_consts if isinstance(c, types.CodeType)]
        for name in current.co_names:
            value = namespace.get(name)
            if isinstance(value, type) and value.__module__ == namespace["__name__"]:
                stack += [f.__code__ for f in vars(value).values() if callable(f)]
            elif isinstance(value, types.FunctionType):
                stack.append(value.__code__)
    return used, tuple(seen.values())


def builtin_types() -> list[type]:
    """The types of the ``builtins`` module's kind (``list``, ``dict``, ``str``...)."""
    found: dict[int, type] = {}
    stack = [object]
    while stack:
        klass = stack.pop()
        if id(klass) not in found:
            found[id(klass)] = klass
            stack += type.__subclasses__(klass)
    return [k for k in found.values() if k.__module__ == "builtins"]


def ban_stop(report: int) -> Callable[[str], None]:
    """What a stub or the hook calls: tell T on ``report`` what was reached, and end this
    process (its own bindings taken now: the candidate may rebind the modules' later)."""
    write, end, dumps, size = os.write, os._exit, json.dumps, len

    def stop(what: str) -> None:
        try:
            data = dumps({"banned": what[:200]}).encode()
            write(report, b"%d\n" % size(data) + data)
        finally:
            end(1)

    return stop


def ban_stub(what: str, stop: Callable[[str], None]) -> Callable[..., Any]:
    def banned(*args: Any, **kwargs: Any) -> None:
        stop(what)

    banned.__name__ = banned.__qualname__ = what.rpartition(".")[2]
    return banned


def ban_hook(
    stop: Callable[[str], None],
    reloads: frozenset[str],
    files: frozenset[str],
    words: frozenset[str],
    modules: frozenset[str],
    codes: tuple[types.CodeType, ...],
) -> Callable[[str, tuple[Any, ...]], None]:
    """The audit hook of :func:`enforce_bans`. Everything it relies on is bound here, before
    the candidate runs (it may rebind the runner's globals and the builtins afterwards), and
    it reads the candidate's arguments only as exact built-in values, so none of the
    candidate's code runs inside it."""
    import _thread

    ident, getframe, startswith, text = _thread.get_ident, sys._getframe, str.startswith, str
    kind, subclass, identity, read_file, code_type = type, issubclass, id, open, types.CodeType
    trusted = frozenset(map(id, codes))
    refused = UNAUDITED_MODULES | modules
    processes, heap = PROCESS_EVENTS, HEAP_EVENTS
    stdlib = os.path.dirname(os.__file__) + os.sep
    passed = ("<frozen importlib.", stdlib + "ctypes" + os.sep)  # on the way from the runner
    check_source = banned_source
    checking: set[int] = set()

    def runner_did() -> bool:
        """Whether the nearest caller outside the import system and ctypes is the runner's."""
        frame: types.FrameType | None = getframe(2)
        while frame is not None and startswith(frame.f_code.co_filename, passed):
            frame = frame.f_back
        return frame is not None and identity(frame.f_code) in trusted

    def standard_file(filename: Any, source: Any) -> bool:
        """Whether code compiled as ``filename`` takes the standard library's or the import
        system's name (which :func:`runner_did` trusts) without being that file's."""
        name = filename if kind(filename) is text else ""  # compile has made it a str
        if not startswith(name, ("<frozen", stdlib)):
            return False
        try:
            with read_file(name, "rb") as file:
                own = file.read()
        except OSError:
            return True
        return kind(source) is not bytes or own != source

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import":
            name = text.__str__(args[0]) if subclass(kind(args[0]), text) else ""
            top = name.partition(".")[0]
            if name in reloads or top in refused:
                stop(f"import of {name}")
            if top in ("ctypes", "_ctypes") and not runner_did():
                stop("ctypes")
        elif startswith(event, "ctypes.") or event in ("os.fork", "os.forkpty"):
            if not runner_did():
                stop("ctypes" if event[0] == "c" else "a new process")
        elif event in processes:
            stop("a new process")
        elif event in heap:
            stop(event)
        elif event == "cpython.PyInterpreterState_New":
            stop("a new interpreter")
        elif event == "code.__new__":
            stop("a made-up code object")
        elif event == "exec" and kind(args[0]) is code_type and args[0].co_filename in files:
            stop(f"a reload of {args[0].co_filename}")  # importlib.reload: no import event
        elif event == "compile" and ident() not in checking:
            if standard_file(args[1], args[0]):
                stop("code under the standard library's name")
            checking.add(ident())
            try:
                found = check_source(args[0], words, modules)
            finally:
                checking.discard(ident())
            if found:
                stop(found)

    return hook


def banned_source(source: Any, words: frozenset[str], modules: frozenset[str]) -> str:
    """What banned ``source`` (compiled at run time) uses, as the host's check would flag it
    (names, attributes, imports); "" when nothing. The first pass only: the stubs hold
    whatever this misses."""
    import ast

    if type(source) not in (str, bytes):
        if not issubclass(type(source), (bytes, bytearray, memoryview)):
            return "compiling a syntax tree"
        source = bytes(source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""  # the compiler fails it too
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in words:
            return node.id
        if isinstance(node, ast.Attribute) and node.attr in words:
            return node.attr
        if isinstance(node, ast.alias) and (node.name in words or node.asname in words):
            return node.name
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "*" in modules:
            return "an import"
        for name in [a.name for a in node.names] if isinstance(node, ast.Import) else []:
            if name.partition(".")[0] in modules:
                return f"import of {name}"
        if isinstance(node, ast.ImportFrom) and str(node.module).partition(".")[0] in modules:
            return f"import of {node.module}"
    return ""


def report_exit(pid: int, sock: socket.socket) -> None:
    """Z: wait for the program's process to end (T kills it at its time limit), then send
    T its exit status as ``os.waitstatus_to_exitcode`` gives it (``-N``: killed by signal N),
    its peak memory (KiB) and the CPU seconds it used, all its threads'. The program cannot
    reach this socket."""
    with contextlib.suppress(OSError):  # T gave up on the test, or no status to have
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        sock.sendall(b"%d %d %.6f" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss, cpu))
    sock.close()


STACK_BYTES = 256 * 1024 * 1024
"""The main thread's stack limit for a program (``RLIMIT_STACK``, raised up to the hard limit,
never lowered), as contest judges give: deep recursion (in Python, through C frames:
``functools.cache``, ``sorted`` keys) needs more than the usual 8 MiB. Threads keep their
own ``stack_size``."""


def set_limit(which: int, wanted: int, *, lower: bool = True) -> None:
    """Set one rlimit to ``wanted`` (never above the hard limit; with ``lower`` off, never
    below the current soft limit either)."""
    import resource

    soft, hard = resource.getrlimit(which)
    value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if not lower and (soft == resource.RLIM_INFINITY or soft >= value):
        return
    resource.setrlimit(which, (value, hard))


def limit_program(program: Record) -> None:
    """C, before the program: its stack (raised), its memory (``RLIMIT_DATA``: private
    writable memory, what a program allocates, not address space it reserves), and no
    processes of its own."""
    import resource

    set_limit(resource.RLIMIT_STACK, program.get("stack") or STACK_BYTES, lower=False)
    memory = (program.get("native") or {}).get("memory", program.get("memory"))
    if memory:
        set_limit(resource.RLIMIT_DATA, int(memory))
    set_limit(resource.RLIMIT_FSIZE, 0)  # where no filter below holds: files stay empty
    forbid_processes()
    forbid_storage()


SECCOMP_CALLS = {
    "x86_64": (0xC000003E, 56, (57, 58), (62, 234, 129, 297), (200,)),
    "aarch64": (0xC00000B7, 220, (), (129, 131, 138, 240), (130,)),
}
"""Per machine: its seccomp architecture, ``clone``'s number, those of ``fork`` and ``vfork``
where it has them, the calls that signal the process (or thread group) their first argument
names (``kill``, ``tgkill``, ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``), and ``tkill``
(``clone3`` is 435, ``pidfd_send_signal`` 424 and ``pidfd_open`` 434 on both)."""
OWNER_CALLS = {"x86_64": (72, 16), "aarch64": (25, 29)}
"""Per machine, ``fcntl``'s and ``ioctl``'s numbers."""
OWNER_COMMANDS = ((8, 15, 10), (0x8901, 0x8902))
"""``fcntl``'s ``F_SETOWN``, ``F_SETOWN_EX`` and ``F_SETSIG``; ``ioctl``'s ``FIOSETOWN`` and
``SIOCSPGRP``: they name a process the kernel then signals (any signal, with ``F_SETSIG``)
when the descriptor is ready (``O_ASYNC``), with the permission of whoever named it."""


def forbid_processes() -> None:
    """C, before a program or the candidate's code: it may start threads, not processes, and
    signal only itself, as on a contest judge: a test's clock is its process's CPU time, which
    a child's work would escape, and the judge shares its user and pid namespace (a stopped
    judge would hold the sandbox until the exec's timeout). A seccomp filter (inherited
    through ``execve``):
    ``fork``, ``vfork`` and ``clone`` without ``CLONE_THREAD`` fail with ``EAGAIN``;
    ``clone3``, whose flags a filter cannot read, with ``ENOSYS`` (the C library then calls
    ``clone``); a signal to another process, ``tkill``, pidfds and making a descriptor signal
    its owner (``OWNER_COMMANDS``) with ``EPERM``; a call of another ABI kills the process.
    Where the machine or the kernel has no such filter, nothing changes."""
    import errno

    found = SECCOMP_CALLS.get(os.uname().machine)
    if found is None:
        return
    arch, clone, forking, signals, denied = found
    fcntl, ioctl = OWNER_CALLS[os.uname().machine]
    fcntl_commands, ioctl_commands = OWNER_COMMANDS
    allow, kill = 0x7FFF0000, 0x80000000
    eagain, enosys = 0x50000 | errno.EAGAIN, 0x50000 | errno.ENOSYS
    eperm = 0x50000 | errno.EPERM
    load, equal, at_least, has_bits = 0x20, 0x15, 0x35, 0x45
    own = "own"
    # (opcode, operand, where it jumps if true, if false): a return value below, a check of an
    # argument below (``own``: a signal's target; ``fcntl``, ``ioctl``: their command), None
    # the next instruction
    body: list[Instruction] = [
        (load, 4, None, None),  # the call's ABI
        (equal, arch, None, kill),
        (load, 0, None, None),  # its number
        (at_least, 0x40000000, kill, None),  # x32
        *((equal, number, eperm, None) for number in (*denied, 424, 434)),
        *((equal, number, own, None) for number in signals),
        (equal, fcntl, "fcntl", None),
        (equal, ioctl, "ioctl", None),
        (equal, 435, enosys, None),
        *((equal, number, eagain, None) for number in forking),
        (equal, clone, None, allow),
        (load, 16, None, None),  # clone's flags (their low half)
        (has_bits, 0x10000, allow, eagain),  # CLONE_THREAD
    ]
    labels = {own: len(body)}
    body += [
        (load, 16, None, None),  # own: the signal's target (a pid_t, the low half)
        (equal, os.getpid(), allow, eperm),
    ]
    for name, commands in (("fcntl", fcntl_commands), ("ioctl", ioctl_commands)):
        labels[name] = len(body)
        body.append((load, 24, None, None))  # the command (its low half)
        body += [(equal, command, eperm, None) for command in commands[:-1]]
        body.append((equal, commands[-1], eperm, allow))
    install_filter(body, [allow, eagain, enosys, eperm, kill], labels)


STORAGE_CALLS = {
    # open and openat (the argument holding their flags); calls that make files, directories
    # or links: creat, mkdir(at), mknod(at), link(at), symlink(at), truncate; calls that make
    # memory of the kernel's: memfd_create, memfd_secret, shmget, msgget, mq_open, socket,
    # socketpair, io_uring_setup (whose requests pass no filter), openat2 (flags out of
    # reach); fcntl (its F_SETPIPE_SZ)
    "x86_64": (
        ((2, 1), (257, 2)),
        (85, 83, 258, 133, 259, 86, 265, 88, 266, 76),
        (319, 447, 29, 68, 240, 41, 53, 425, 437),
        72,
    ),
    "aarch64": (
        ((56, 2),),
        (34, 33, 37, 36, 45),
        (279, 447, 194, 186, 180, 198, 199, 425, 437),
        25,
    ),
}
"""Per machine, the calls :func:`forbid_storage` filters."""
WRITE_FLAGS = 0o3 | 0o100 | 0o1000
"""``O_WRONLY``, ``O_RDWR``, ``O_CREAT``, ``O_TRUNC`` (``O_TMPFILE`` needs write access)."""
F_SETPIPE_SZ = 1031


def forbid_storage() -> None:
    """C, before a program: it may read files, not write, make or truncate any (``EROFS``),
    nor make shared memory, message queues, sockets or larger pipes (``EPERM``), as a contest
    judge allows (a seccomp filter, inherited through ``execve``): what it kept there would be
    memory its limit does not count (``RLIMIT_DATA`` and peak memory are the process's: 64
    MiB in ``/tmp`` passed a limit of 32 MB). Memory it maps shared counts in its peak. Where
    the machine has no such filter, ``RLIMIT_FSIZE`` (0) keeps its files empty."""
    import errno

    found = STORAGE_CALLS.get(os.uname().machine)
    if found is None:
        return
    opens, makes, kernel, fcntl = found
    arch = SECCOMP_CALLS[os.uname().machine][0]
    allow, kill = 0x7FFF0000, 0x80000000
    erofs, eperm = 0x50000 | errno.EROFS, 0x50000 | errno.EPERM
    load, equal, has_bits = 0x20, 0x15, 0x45
    returns = [allow, erofs, eperm, kill]
    # (opcode, operand, jump if true, if false): a return value, the name of a check of an
    # argument below, or None (the next instruction)
    body: list[Instruction] = [
        (load, 4, None, None),
        (equal, arch, None, kill),
        (load, 0, None, None),
        *((equal, number, erofs, None) for number in makes),
        *((equal, number, eperm, None) for number in kernel),
        *((equal, number, f"flags {argument}", None) for number, argument in opens),
        (equal, fcntl, "pipe size", allow),
    ]
    checks = {}
    for _, argument in opens:  # an open's flags (their low half)
        checks[f"flags {argument}"] = len(body)
        body += [(load, 16 + 8 * argument, None, None), (has_bits, WRITE_FLAGS, erofs, allow)]
    checks["pipe size"] = len(body)  # fcntl's command
    body += [(load, 24, None, None), (equal, F_SETPIPE_SZ, eperm, allow)]
    install_filter(body, returns, checks)


_MADE: dict[str, Any] = {}


def libc() -> Any:
    """The C library through ctypes, loaded once (T does first): the processes forked after
    inherit it (each load costs as much as a small test), with the type of a filter's
    program (made by the zygote, before its children)."""
    if not _MADE:
        import ctypes

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        _MADE.update(libc=ctypes.CDLL(None, use_errno=True), program=Program)
    return _MADE["libc"]


def install_filter(body: list[Instruction], returns: list[int], labels: dict[str, int]) -> None:
    """Assemble a seccomp filter (classic BPF: ``body``, then a return of each of
    ``returns``; ``labels`` name instructions of the body by index) and install it on this
    thread and what it starts."""
    import ctypes
    import struct

    def jump(at: int, to: int | str | None) -> int:
        if to is None:
            return 0
        target = labels[to] if isinstance(to, str) else len(body) + returns.index(to)
        return target - at - 1

    code = b"".join(
        struct.pack("HBBI", op, jump(i, yes), jump(i, no), k)
        for i, (op, k, yes, no) in enumerate(body)
    ) + b"".join(struct.pack("HBBI", 0x06, 0, 0, value) for value in returns)
    filters = ctypes.create_string_buffer(code)
    c = libc()
    program = _MADE["program"](len(code) // 8, ctypes.addressof(filters))
    if c.prctl(38, 1, 0, 0, 0) == 0:  # PR_SET_NO_NEW_PRIVS, which a filter needs
        c.prctl(22, 2, ctypes.byref(program), 0, 0)  # PR_SET_SECCOMP, a filter


def child_stdio(sock: socket.socket, err: socket.socket) -> None:
    """C: the socket as stdin and stdout, ``err`` as stderr, nothing else open."""
    os.dup2(sock.fileno(), 0)
    os.dup2(sock.fileno(), 1)
    os.dup2(err.fileno(), 2)
    os.closerange(3, 65536)


def run_program(sock: socket.socket, err: socket.socket, program: types.CodeType) -> None:
    """C for stdin/stdout tests: run the program with the socket as its stdin and stdout, and
    end it as the interpreter ends a script, with the same exit status."""
    import atexit
    import traceback

    atexit._clear()  # a fresh interpreter has no exit handlers: none of the template's
    # Taken before the program runs: what it rebinds in these modules is its own, not the end
    # the interpreter would give it.
    run_exitfuncs, exit_now, print_exception = atexit._run_exitfuncs, os._exit, traceback.print_exc
    child_stdio(sock, err)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (lives until _exit)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    status = 0
    try:
        exec(program, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        status = exit_status(exc.code)
    except BaseException:
        status = 1
        with contextlib.suppress(BaseException):
            print_exception(limit=-3)
    try:
        # The interpreter's shutdown, in its order: join non-daemon threads (a program that
        # never ends its threads runs into its time limit), run atexit handlers, flush.
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        run_exitfuncs()
    except BaseException:
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:
            status = 120  # as the interpreter, when its streams cannot be flushed
    exit_now(status)


def exec_program(sock: socket.socket, err: socket.socket, argv: list[str], env: Env) -> None:
    """C for a compiled (or another interpreter's) program: become it."""
    child_stdio(sock, err)
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc}\n".encode())
    os._exit(127)


class BuildError(Exception):
    """A program could not be made runnable: ``kind`` ``compile`` (its code), ``toolchain``
    (the sandbox lacks the language's tools) or ``sandbox`` (its disk is full). Only T, before
    anything of the candidate's ran, finds the last two."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def prepare(native: Record, code: str, program: Record) -> tuple[list[str], Env]:
    """T, for a language other than Python, before the zygote: check the sandbox's tools and
    disk, write the source into this run's directory, and return the command and environment
    every test runs (what is wrong here is the sandbox's, as nothing of the candidate has
    run)."""
    import shutil

    work = program["dir"]
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "LANG": "C.UTF-8"}
    env["HOME"] = work
    env.update({k: v.replace("{dir}", work) for k, v in native.get("env", {}).items()})
    tools = native["compile"] or native["run"]
    run = list(native["run"])
    for tool in (tools[0], *(() if "/" in run[0] else (run[0],))):
        if shutil.which(tool, path=env["PATH"]) is None:
            raise BuildError(
                "toolchain",
                f"the sandbox has no {native['toolchain'] or tool} for {native['language']}"
                f" (install it in the image: {native['install']})",
            )
    short = disk_short(work)
    if short:
        raise BuildError("sandbox", disk_full(short))
    try:
        files = {native["source"]: code + native.get("epilogue", ""), **native.get("files", {})}
        for name, text in files.items():
            with open(os.path.join(work, name), "w", encoding="utf-8") as written:
                written.write(text)
    except OSError as exc:
        raise BuildError("sandbox", disk_full(exc.strerror or str(exc))) from None
    found = run[0] if "/" in run[0] else shutil.which(run[0], path=env["PATH"])
    assert found is not None  # checked above
    return [found, *run[1:]], env


def compile_native(native: Record, code: str, program: Record, env: Env) -> None:
    """Z: compile the program T wrote, once (its failure is the code's: a compile error),
    with the header T precompiled in front of the include path where there is one
    (:func:`precompiled`)."""
    os.chdir(program["dir"])
    argv = list(native["compile"])
    if argv:
        limits = program["compile_limits"]
        if program.get("pch_dir"):
            argv[1:1] = ["-I", program["pch_dir"]]
        status, said = run_tool(argv, env, limits)
        if status != 0:
            raise BuildError("compile", compile_message(status, said, limits))


DISK_HEADROOM = (32 << 20, 256)
"""Bytes and files a build needs free on the sandbox's disk: with less, the disk is taken
(by files earlier programs there left), and a compile there would fail for it."""


def disk_short(path: str) -> str:
    """What the disk holding ``path`` lacks for a build ("" when it has room)."""
    room = os.statvfs(path)
    if room.f_bavail * room.f_frsize < DISK_HEADROOM[0]:
        return f"{room.f_bavail * room.f_frsize >> 20} MiB free"
    if room.f_files and room.f_favail < DISK_HEADROOM[1]:
        return f"{room.f_favail} files free"
    return ""


def disk_full(said: str) -> str:
    """Why a sandbox cannot build programs: its disk (an ``infra`` outcome, not a 0.0)."""
    return f"the sandbox's disk is full ({said}): files earlier programs there left?"


def run_tool(
    argv: list[str], env: Env, limits: Record, cwd: str | None = None
) -> tuple[int | None, str]:
    """Run a compiler under the compile limits (in ``cwd``, else here): (exit status, None
    past its wall-clock backstop; the tail of what it said).

    Its time limit is CPU time, the whole process tree's (a compiler runs others), so a
    loaded machine does not fail a correct program's compile; the wall-clock backstop ends
    one that waits. A tree past its CPU time reads as killed by ``SIGXCPU``."""
    import resource
    import subprocess

    def limit() -> None:
        set_limit(resource.RLIMIT_CPU, int(limits["cpu"]) + 1)
        set_limit(resource.RLIMIT_DATA, int(limits["memory"]))

    def used() -> float:
        spent = resource.getrusage(resource.RUSAGE_CHILDREN)
        return spent.ru_utime + spent.ru_stime

    before = used()
    tool = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a group of its own, all of it ended at the backstop
        preexec_fn=limit,
        cwd=cwd,
    )
    try:
        out, err = tool.communicate(timeout=limits["wall"])
    except subprocess.TimeoutExpired:
        os.killpg(tool.pid, signal.SIGKILL)
        tool.communicate()
        return None, ""
    said = (err or out).decode("utf-8", "replace")
    if used() - before > limits["cpu"]:
        return -signal.SIGXCPU, said
    return tool.returncode, said


def compile_message(status: int | None, said: str, limits: Record) -> str:
    """What a failed compile says: its first error line (or its last words)."""
    if status is None:
        return f"compile error: the compiler ran past {limits['wall']:g}s of wall-clock time"
    if status < 0 and -status in (signal.SIGXCPU, signal.SIGKILL):
        return f"compile error: the compiler ran past {limits['cpu']:g}s of CPU time"
    lines = [line for line in said.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    first = (errors or lines[-1:] or [f"the compiler exited with {status}"])[0]
    return f"compile error: {first.strip()}"


JUDGE_CACHE = "/opt/sandboxkit/cache"
"""Where a sandbox with a judge's uid keeps the judge's own cache (``local.view``): its files
outlive a run, and a renewal of the sandbox under a warm template, and no command can write
them."""


def precompiled(native: Record, code: str, env: Env, limits: Record) -> str:
    """T, as the judge, before its zygote: the directory holding ``native['pch']`` precompiled
    with the compile's own flags, for the front of the include path, built once in the judge's
    cache (:data:`JUDGE_CACHE`); "" where the program does not include the header first-hand
    (garbage does not pay for building it), or where the sandbox has no such cache: no
    command may write what a later completion's compile would read, so a header is kept only
    where the judge alone can write it (elsewhere each compile reads the header's text)."""
    import re

    header = native.get("pch")
    if not header or not re.search(r"#\s*include\s*<" + re.escape(header) + ">", code):
        return ""
    try:
        info = os.stat(JUDGE_CACHE)
    except OSError:
        return ""
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return ""  # not the judge's alone
    argv = list(native["compile"])
    flags = [a for i, a in enumerate(argv[1:], 1) if a != "-o" and argv[i - 1] != "-o"]
    flags = [a for a in flags if a != native["source"]]
    name = blake2b(json.dumps([argv[0], flags, header]).encode(), digest_size=8).hexdigest()
    own = os.path.join(JUDGE_CACHE, f"pch-{name}")
    if os.path.isfile(os.path.join(own, header + ".gch")):
        return own
    import shutil
    import tempfile

    fresh = tempfile.mkdtemp(dir=JUDGE_CACHE)
    try:
        with open(os.path.join(fresh, "header.h"), "w") as wrapper:
            wrapper.write(f"#include <{header}>\n")
        built = os.path.join(fresh, header + ".gch")
        os.makedirs(os.path.dirname(built), exist_ok=True)
        limits = dict(limits, cpu=PCH_CPU, wall=PCH_CPU * WALL_FACTOR)
        compile_header = [argv[0], *flags, "-x", "c++-header", "header.h", "-o", built]
        status, _ = run_tool(compile_header, env, limits, cwd=fresh)
        if status != 0:
            return ""
        os.remove(os.path.join(fresh, "header.h"))
        for path in (fresh, os.path.dirname(built), built):  # the compiles' to read
            os.chmod(path, 0o644 if path == built else 0o755)
        os.rename(fresh, own)  # in place whole, or not at all
        return own
    except OSError:
        return ""
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


PCH_CPU = 60.0
"""CPU seconds a sandbox's first compile may spend precompiling its header, as a compile is
judged (:func:`run_tool`: a wall-clock backstop of ``WALL_FACTOR`` times as many seconds)."""


def hmac_equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


def exit_status(code: object) -> int:
    """The exit status ``python3`` gives for ``sys.exit(code)``: ``None`` 0, an integer its
    low byte (-1 when it overflows a C long), anything else 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        whole = int.__int__(code)
        return (whole if -(1 << 63) <= whole < 1 << 63 else -1) & 0xFF
    return 1


# -- the judge (T) --------------------------------------------------------------------------------


def seal(key: bytes, line: str) -> str:
    """The MAC of one record line under the exec's key (hex)."""
    return blake2b(line.encode(), key=key, digest_size=16).hexdigest()


class Reporter:
    """T's records on stdout, which all fit in the exec's output cap by construction: each
    test's record is held to its share of it (``limit``), and whatever a record holds beyond
    (a field of ``keep``), like any line written early, is paid out of what no share takes
    (:func:`spare`, :meth:`spend`). Records go in lines of many, each line sealed with the
    exec's key, written at most ``HOLD`` seconds apart while tests end, and at the end: a line
    (a seal, a write) per test would cost a call-heavy row more than its calls, and wake the
    sandbox's reader once per test. Consecutive tests that passed, or returned short values,
    share a record."""

    HOLD = 0.1
    LINE = 256
    """Records in one line at most."""

    def __init__(self, key: bytes, tests: int = 1) -> None:
        self.key = key
        self.limit = record_limit(tests)
        """Bytes of a record's JSON at most, its ``keep`` fields aside."""
        self.spare = spare(tests)
        """Bytes of the cap left to records beyond their shares, and to early lines."""
        self.flushed = time.monotonic()
        self.held: list[Record] = []
        self.tests = 0
        """Tests recorded so far."""

    def spend(self, size: int) -> bool:
        """Take ``size`` bytes out of the spare ones; False (nothing taken) if too few are
        left."""
        if size > self.spare:
            return False
        self.spare -= size
        return True

    def joined(self, record: Record) -> bool:
        """Whether ``record`` (a test's, with its status and at most a value) went into the
        last record held: the next of its run of passes, or of its returned values."""
        last, test, status = self.held[-1], record["test"], record["status"]
        if status != last.get("status"):
            return False
        if status == "passed":
            through = last["through"] if "through" in last else last["test"]
            if through + 1 == test:
                last["through"] = test
                return True
            return False
        if "value" not in record or "values" not in last:
            return False
        values = last["values"]
        if last["test"] + len(values) != test:
            return False
        values.append(record["value"])
        return True

    def emit(self, record: Record, keep: tuple[str, ...] = ()) -> None:
        """Write ``record``, its text fields shortened to fit ``limit`` (those in
        ``keep``, paid out of the spare bytes by the caller, do not count)."""
        texts = [name for name in ("stderr", "detail", "load_error") if record.get(name)]
        if texts:  # a record without them is short: its parts' sizes are bounded where made
            line = json.dumps(record)
            kept = sum(len(json.dumps(record[k])) for k in keep if k in record)
            for name in texts:
                while len(line) - kept > self.limit and record.get(name):
                    record[name] = record[name][: len(record[name]) // 2]
                    line = json.dumps(record)
        self.add(record)

    def add(self, record: Record) -> None:
        """Write ``record``, whose parts' sizes are bounded where it was made (no text), into
        the record before it where it continues that one's run of passes or values (each
        item of which takes less than the record of its own it stands for)."""
        ours = "test" in record and len(record) == 2 + ("value" in record)
        self.tests += "test" in record
        if ours and self.held and self.joined(record):
            return
        if record.get("status") == "returned" and "value" in record:
            record = {"test": record["test"], "status": "returned", "values": [record["value"]]}
        self.held.append(record)
        now = time.monotonic()
        due = now - self.flushed >= self.HOLD and self.spend(LINE_BYTES)
        if due or "done" in record or len(self.held) >= self.LINE:
            line = dumps({"records": self.held})
            self.held = []
            sys.stdout.write(f"{seal(self.key, line)} {line}\n")
            sys.stdout.flush()
            self.flushed = now


def value_digest(data: JSON) -> str:
    """A digest of an encoded value that equal values share: sets and dicts in any order,
    ``-0.0`` as ``0.0`` (strict comparison has them equal)."""

    def canonical(x: JSON) -> JSON:
        t = type(x)
        if t is float:
            return x + 0.0
        if t is list:
            return [canonical(v) for v in x]
        if t is dict:
            return {
                tag: sorted(canonical(v), key=json.dumps)
                if tag in ("$s", "$fs", "$d")
                else _decimal_digits(v)
                if tag == "$dec"
                else canonical(v)
                for tag, v in x.items()
            }
        return x

    return blake2b(json.dumps(canonical(data)).encode(), digest_size=DIGEST_BYTES).hexdigest()


# -- results compared as EvalPlus compares them (the judge's, and the host's) -------------------

RTOL = 1e-07
"""The relative tolerance EvalPlus passes to ``np.allclose`` (``np.testing.assert_allclose``'s
default)."""
FLOATS_ATOL = 1e-6
"""The absolute tolerance EvalPlus uses for float results where the task's ``atol`` is 0: from
the first result expected to be floats (:func:`is_floats`) that its candidate returned a value
for, for the task's later inputs too."""
UNEQUAL_ALIKE = (b'"$f"', b'"$it"', b'"$dec"')
"""Tags of encoded values that may be unequal to the same encoding: NaN (a float's, a
Decimal's), an iterator (equal to itself alone)."""
_INT64 = 1 << 63


def is_floats(value: Any) -> bool:
    """EvalPlus's ``is_floats``: a float, or a non-empty list or tuple of floats only."""
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, float) for v in value)
    return False


def evalplus_equal(out: Any, expected: Any, atol: float) -> bool:
    """Whether EvalPlus passes ``out`` for ``expected``: ``out == expected``; failing that,
    under a tolerance ``atol`` (``FLOATS_ATOL`` or the task's), the same type, the same length
    (a list or tuple) and ``np.allclose(out, expected, rtol=1e-07, atol=atol)``. NaN never
    equals (``==`` and ``allclose`` both say so); a tuple is never a list. Both are plain values
    (the codec's: no comparison runs code of the candidate's)."""
    if out == expected:
        return True
    if atol == 0 or type(out) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)) and len(out) != len(expected):
        return False
    return allclose(out, expected, atol)


def allclose(a: Any, b: Any, atol: float) -> bool:
    """``np.allclose(a, b, rtol=RTOL, atol=atol)`` for plain values: numbers, or nested lists
    and tuples of them of one shape. What NumPy cannot compare (text, None, ragged nesting,
    integers past 64 bits) is not close; arrays of different shapes are not close either
    (NumPy would broadcast some)."""
    x, y = _numbers(a), _numbers(b)
    if x is None or y is None or x[0] != y[0]:
        return False
    return all(_close(p, q, atol) for p, q in zip(x[1], y[1], strict=True))


def _numbers(value: Any) -> tuple[tuple[int, ...], list[Any]] | None:
    """A nested list or tuple of numbers as NumPy reads it: its shape and its numbers in order;
    None where NumPy would make no numeric array of it."""
    if isinstance(value, (bool, float, complex)):
        return (), [value]
    if isinstance(value, int):
        return ((), [value]) if -_INT64 <= value < _INT64 else None
    if not isinstance(value, (list, tuple)):
        return None
    parts = [_numbers(v) for v in value]
    if any(p is None for p in parts):
        return None
    shapes = {p[0] for p in parts if p is not None}
    if len(shapes) > 1:
        return None
    inner = shapes.pop() if shapes else ()
    return (len(parts), *inner), [n for p in parts if p is not None for n in p[1]]


def _close(x: Any, y: Any, atol: float) -> bool:
    """NumPy's ``isclose`` for two numbers: infinities equal only themselves, NaN nothing."""
    import cmath

    if not (cmath.isfinite(x) and cmath.isfinite(y)):
        return bool(x == y)
    return bool(abs(x - y) <= atol + RTOL * abs(y))


def _decimal_digits(text: str) -> str:
    """One spelling of each Decimal value: ``1.0`` and ``1.00`` are equal."""
    import decimal

    number = _decimal(text)
    if number.is_nan() or not number:
        return str(abs(number))
    return str(number.normalize(decimal.Context(prec=decimal.MAX_PREC)))


def output_bytes(text: str | bytes) -> bytes:
    """``text`` as the bytes a program wrote: what a decoder kept with ``surrogateescape``
    comes back byte for byte; any other lone surrogate as its own UTF-8 form."""
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def split_tokens(text: str | bytes, case_sensitive: bool = True) -> list[bytes]:
    """The tokens of ``text`` (ASCII letters lowered unless ``case_sensitive``)."""
    data = output_bytes(text)
    return (data if case_sensitive else data.lower()).split()


def tokens_digest(text: str | bytes, case_sensitive: bool = True) -> str:
    """A digest of ``text``'s tokens: two outputs have the same one exactly when the token
    checker accepts one for the other. Standard library only, so the in-sandbox runner can
    share this definition (tokens hold no whitespace, so joining them with a space is
    unambiguous)."""
    joined = b" ".join(split_tokens(text, case_sensitive))
    return blake2b(joined, digest_size=DIGEST_BYTES).hexdigest()


def make_undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc().prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def read_key() -> mmap.mmap:
    """The exec's key, read first (no code of the candidate runs yet) into memory that no
    fork inherits (``MADV_DONTFORK``): the zygote and its children never hold it."""
    size = 2 * KEY_BYTES + 1
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    memory.madvise(mmap.MADV_DONTFORK)
    with memoryview(memory) as view:
        got = 0
        while got < size:
            n = os.readv(0, [view[got:]])
            if not n:
                raise EOFError
            got += n
    return memory


def become_judge() -> tuple[int, int] | None:
    """T: take the judge's uid and gid (0 of the sandbox's user namespace, a host uid of its
    own: ``sandboxkit.local.judge``) where the sandbox gave T the capabilities to; returns the
    uid and gid T had, the candidate's, for the zygote to take back. None where the sandbox
    has one uid (or T is root already): then only the per-test filter stands between the
    candidate's processes and T."""
    ids = os.getuid(), os.getgid()
    if ids[0] == 0:
        return None
    try:
        os.setresgid(0, 0, 0)
    except OSError:
        return None  # no CAP_SETGID: not given the judge's uid
    try:
        os.setresuid(0, 0, 0)
    except OSError:
        os.setresgid(*(ids[1],) * 3)
        return None
    return ids


def take_candidate_ids(ids: tuple[int, int] | None) -> None:
    """Z, first: take the candidate's uid and gid back from the judge's; the kernel clears
    every capability as the last uid 0 goes, and bwrap's ``no_new_privs`` keeps a program
    from getting any back through an ``execve``."""
    if ids is not None:
        os.setresgid(*(ids[1],) * 3)
        os.setresuid(*(ids[0],) * 3)


CANDIDATE_OOM_SCORE_ADJ = 1000
"""The kernel's highest OOM score, which the zygote takes (its test processes inherit it): T
keeps the lower one the host gave it, so the OOM killer takes every process of the
candidate's before T, whatever memory T holds (the tests) and whatever fills the sandbox's."""


def take_oom_score() -> None:
    """Z, first: raise its OOM score to ``CANDIDATE_OOM_SCORE_ADJ`` (raising needs no
    privilege; writing the file needs the process dumpable, which Z, like T, is not: it is for
    as long as the write, before anything of the candidate's exists). Where the kernel refuses,
    Z keeps T's score, as before the judge had a score of its own."""
    try:
        libc().prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return
    try:  # no text stream: its codec's look-up costs a fresh fork page copies
        adj = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(adj, b"%d" % CANDIDATE_OOM_SCORE_ADJ)
        finally:
            os.close(adj)
    except OSError:
        pass
    finally:
        make_undumpable()


def start_zygote(
    code: str,
    setup: str,
    program: Record | None,
    run: tuple[list[str], Env] | None,
    bans: Record | None = None,
    candidate: tuple[int, int] | None = None,
) -> tuple[int, socket.socket]:
    t_end, z_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        t_end.close()
        zygote_process(z_end, candidate)
        zygote(z_end, code, setup, program, run, bans)
        os._exit(0)
    z_end.close()
    return pid, t_end


def zygote_process(z_end: socket.socket, candidate: tuple[int, int] | None) -> None:
    """Z, first: its OOM score and the candidate's ids (it never runs anything with the
    judge's uid), stdio on /dev/null and no descriptor but its socket to T."""
    try:
        take_oom_score()
        take_candidate_ids(candidate)
    except BaseException:
        os._exit(70)
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    keep = z_end.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


FRESH_ZYGOTE = (
    "import marshal, sys\n"
    "code, first = marshal.loads(sys.stdin.buffer.read())\n"
    "runner = {'__name__': '__sandboxkit_zygote__'}\n"
    "exec(code, runner)\n"
    "runner['fresh_zygote'](int(sys.argv[1]), first)\n"
)
"""The program of a zygote started afresh (:func:`restart_zygote`): the runner's own code
object and the candidate's code come on its stdin."""
RUNNER_CODE = sys._getframe().f_code
"""The code of this module as it runs here, whichever way it was started (``python -c``, a
warm template that ran all but its main guard once, a fresh zygote)."""
RESTART: list[Callable[[], None]] = []
"""T: how to start a fresh zygote on its socket to the zygote that became the first test's
process (:func:`zygote`), while one is needed for a rerun and none has been started."""
ZYGOTES: list[int] = []
"""T: the zygotes it started afresh, killed at its end."""


def restart_zygote(
    t_end: socket.socket, first: Record, candidate: tuple[int, int] | None, timeout: float
) -> None:
    """T, for a rerun once its zygote became the first test's process: a zygote in a fresh
    interpreter, which takes T's socket to the old one, compiled and ready. Exec'd, so nothing
    of T's memory (the tests, the key) is in it, and started with the candidate's ids where
    T has the judge's (rare: a job that ends at its first failure needs another process only
    after a test whose threads worked on past it). It runs the runner's own code object
    (:data:`RUNNER_CODE`: no source, no compile)."""
    import marshal
    import subprocess

    mine, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", FRESH_ZYGOTE, str(theirs.fileno())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            user=None if candidate is None else candidate[0],
            group=None if candidate is None else candidate[1],
        )
    finally:
        theirs.close()
    ZYGOTES.append(process.pid)
    assert process.stdin is not None
    with process.stdin as feed:
        feed.write(marshal.dumps((RUNNER_CODE, first)))
    os.dup2(mine.fileno(), t_end.fileno())
    mine.close()
    loaded = load(t_end, process.pid, timeout * 2, None)  # as the first zygote's
    if "load_error" in loaded:
        raise RemoteError(f"a fresh zygote did not start: {loaded['load_error']}")


def fresh_zygote(fd: int, first: Record) -> None:
    """A zygote started afresh by T (:func:`restart_zygote`): as the one T forks, with its
    socket to T at ``fd``."""
    ctl = socket.socket(fileno=fd)
    zygote_process(ctl, None)
    os.chdir(first["workdir"])  # the candidate's, with its ids (T's may not enter it)
    zygote(ctl, first["code"], first.get("setup", ""), None, None, first.get("bans"))
    os._exit(0)


def load(t_end: socket.socket, zygote_pid: int, timeout: float, wall: float | None) -> Record:
    """T: the zygote's word that the code is compiled (built), or why not. The zygote runs
    nothing of the candidate's; what it may say of the build is only ``compile`` (a compile
    error, the code's)."""
    try:
        Clock(zygote_pid, timeout, wall).wait([t_end])
    except TimeUp as exc:
        return {"load_error": f"TimeoutError: loading the code {exc}", "timeout": True}
    try:
        loaded = read_frame(t_end.fileno())
    except (EOFError, ValueError):
        return {"load_error": "the code's process ended while loading"}
    if type(loaded) is not dict or not ("ready" in loaded or "load_error" in loaded):
        return {"load_error": "the code's process sent something else than its names"}
    if "load_error" in loaded:
        build = "compile" if loaded.get("build") == "compile" else ""
        return {"load_error": str(loaded["load_error"]), "build": build}
    return loaded


def child_channel(
    t_end: socket.socket, timeout: float, wall: float | None = None, requested: bool = False
) -> tuple[int, Channel]:
    """A fresh child from the zygote (which runs none of the candidate's code); ``requested``:
    T asked for it already (:func:`request_child`)."""
    try:
        if not requested and RESTART:
            RESTART.pop()()
        t_end.settimeout(timeout * WALL_FACTOR if wall is None else wall)
        if not requested:
            request_child(t_end)
        msg, fds, _flags, _addr = socket.recv_fds(t_end, 256, 3)
        said = json.loads(msg.split(b"\n", 1)[1])
        pid = int(said["child"])
        socks = [socket.socket(fileno=fd) for fd in fds]
        # Reads and writes wait in the kernel, a look at the test's clock at most this far
        # apart (a read that times out goes to the clock: read_some), and at most half the
        # margin before the run's end where the host gave it one (:class:`Cut`).
        interval = min(timeout / CPUS, RUN_MARGIN / 2 if RUN_END else timeout)
        seconds = int(interval)
        tick = struct.pack("@ll", seconds, max(int((interval - seconds) * 1e6), 1000))
        for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
            socks[0].setsockopt(socket.SOL_SOCKET, option, tick)
    except Exception:
        raise RemoteError("the candidate's process could not start a test") from None
    socks += [None] * (3 - len(socks))  # type: ignore[list-item]
    clock = Clock(pid, timeout, wall)
    became = said.get("became")
    if type(became) is float:  # the zygote's CPU time when it became the child (its word,
        clock.base = min(became, clock.used() or 0.0)  # given before the candidate's code ran)
    return pid, Channel(socks[0], clock, socks[1], socks[2])


def request_child(t_end: socket.socket, become: bool = False) -> None:
    """Ask the zygote for a child. T asks for the first one before the zygote is ready
    (:func:`main`): the zygote forks it as soon as it has compiled the code, while T waits,
    with no round trip between them on the way. ``become``: the zygote becomes it (a job that
    ends at its first failure, whose tests after it run in that process while it answers;
    :data:`RESTART` starts a fresh zygote if another is needed)."""
    t_end.sendall(frame({"become": True} if become else {"fork": True}))


MAX_NAMES = 1 << 20
"""Bytes at most of what a test's process says of the candidate's names when it has loaded
the code (the candidate's word: bounded like everything it sends)."""


class LoadFailed(Exception):
    """The candidate's code failed to load in a test's process (``timeout``: ran past its
    allowance)."""

    def __init__(self, detail: str, timeout: bool = False) -> None:
        super().__init__(detail[:MAX_RECORD])
        self.timeout = timeout


def await_load(channel: Channel, pid: int) -> None:
    """T: wait for the test's process to load the candidate's code, within its allowance
    (twice the test's CPU time, on the process's own clock, and a wall-clock backstop), then
    start the test's clock from the CPU time the process has used: every cycle after it
    counts toward the test. Threads that the load started and that live on bring what they
    used while it loaded with them: the first test is charged it too (a module that works
    through its load counts it there; one whose work carries on into the tests, every cycle
    of it in the first)."""
    test = channel.clock
    loading = Clock(pid, 2 * test.limit, 2 * test.wall, base=test.base)
    try:
        where = channel.frames.read(MAX_NAMES, loading)
        if type(where) is dict and type(where.get("proc")) is str:
            channel.threads.pid = where["proc"]
        said = channel.frames.read(MAX_NAMES, loading)
    except TimeUp as exc:
        raise LoadFailed(f"TimeoutError: loading the code {exc}", timeout=True) from None
    except (EOFError, OSError, ValueError):
        raise LoadFailed("the code's process ended while loading, or said too much") from None
    names = said.get("loaded") if type(said) is dict else None
    if type(said) is dict and "banned" in said:  # reached at load time
        channel.banned = banned_detail(said["banned"])
        raise Banned(channel.banned)
    if type(said) is dict and "load_error" in said:
        raise LoadFailed(str(said["load_error"]))
    if type(names) is not dict:
        raise LoadFailed("the code's process sent something else than its names")
    channel.names = names
    used = loading.used()
    if used is None:
        raise LoadFailed("the code's process ended while loading")
    threads = channel.threads
    carried = threads.other_cpu(used) if threads.alive() else 0.0
    threads.others = carried
    channel.clock = Clock(pid, test.limit, test.wall, base=used - (carried or 0.0))


def referred_names(names: Any, *codes: types.CodeType) -> dict[str, Any]:
    """The candidate's names (as its process reported them: untrusted) that a test takes:
    those its code refers to, builtins only when it refers to no other of them (the function
    under test named like a builtin, as MBPP's ``sum``), so that a candidate's ``set`` or
    ``sorted`` never stands in for the test's. (What the test defines itself replaces these
    as it runs.)"""
    if type(names) is not dict:
        return {}
    referred: set[str] = set()
    stack = list(codes)
    while stack:
        code = stack.pop()
        referred.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    found = {n: names[n] for n in referred if n in names and not n.startswith("__")}
    own = {n: info for n, info in found.items() if not hasattr(builtins, n)}
    return own or found


def bind(names: dict[str, Any], channel_box: list[Channel]) -> dict[str, Any]:
    """The candidate's names as T sees them: proxies, data (read from the test's process as
    a call's result is), standard modules. What the process said about them is only data: a
    malformed entry is left out (the test then fails on it).

    A module binds only under its own name (``math`` as ``math``), a top-level module of the
    standard library that the test itself names: the candidate's word decides whether the
    name is bound, as it would in its own module, never which code T imports (a module's
    import runs code, ``unittest.__main__`` a test discovery from the working directory)."""
    import importlib

    bound: dict[str, Any] = {}
    for name, info in names.items():
        if type(info) is not dict or len(info) != 1:
            continue
        ((form, data),) = info.items()
        if form == "module" and data == name and name in STANDARD_MODULES:
            with contextlib.suppress(Exception):
                bound[name] = importlib.import_module(name)
        elif form == "value":
            bound[name] = channel_box[0].request({"get": name})
        elif form == "callable":
            bound[name] = _proxy(name, channel_box)
    return bound


STANDARD_MODULES = frozenset(getattr(sys, "stdlib_module_names", sys.builtin_module_names)) - {
    "this",
    "antigravity",
    "__main__",
}
"""Modules a test may take from the candidate by name (``math`` that a test uses without
importing it), and that the zygote imports for the candidate: the standard library's (on
Python 3.9, its built-in ones), less those whose import does something."""


def _proxy(name: str, channel_box: list[Channel]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return channel_box[0].request({"call": name, "args": args, "kwargs": kwargs})

    call.__name__ = call.__qualname__ = name
    return call


def compile_trusted(source: str, filename: str) -> types.CodeType:
    """The dataset's text (a test, its set-up, a prompt) compiled whole, integer literals of
    any length included (HumanEval+'s tests write out results of thousands of digits): Python's
    limit on the digits of decimal text guards the judge against the candidate's, whose
    reading would take quadratic time, and is back in place before anything else runs."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit:
        sys.set_int_max_str_digits(0)
    try:
        return compile(source, filename, "exec")
    finally:
        if limit:
            sys.set_int_max_str_digits(limit)


def prompt_names(prompt: Record | None) -> Callable[[list[Channel]], dict[str, Any]]:
    """The names the row's prompt defines, for a test (dataset text, trusted like the tests,
    run here afresh for each test): all but the function the completion completes, which is
    the candidate's (and which the prompt's own code calls as such)."""
    if not prompt:
        return lambda box: {}
    completes = prompt["completes"]

    def names(box: list[Channel]) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__name__": CANDIDATE_MODULE}
        exec(compile_trusted(prompt["code"], "<prompt>"), namespace)
        namespace[completes] = _proxy(completes, box)
        return {n: v for n, v in namespace.items() if not n.startswith("__") and n != completes}

    return names


def run_asserts(job: Record, t_end: socket.socket, setup: str, report: Reporter) -> None:
    from_prompt = prompt_names(job.get("prompt"))
    tests: list[Callable[[list[Channel]], Record]] = []
    for index, snippet in enumerate(job["tests"]):

        def test(box: list[Channel], snippet: str = snippet, index: int = index) -> Record:
            setup_code = compile_trusted(setup, "<setup>")
            test_code = compile_trusted(snippet, f"<test {index}>")
            prompts = from_prompt(box)
            candidate = {n: i for n, i in box[0].names.items() if n not in prompts}
            taken = referred_names(candidate, setup_code, test_code)
            namespace: dict[str, Any] = {"__name__": "__main__", **bind(taken, box), **prompts}
            exec(setup_code, namespace)
            exec(test_code, namespace)
            return {"status": "passed"}

        tests.append(test)
    run_loaded(tests, t_end, job["timeout"], report, bool(job.get("stop_at_first_failure")))


def run_calls(job: Record, t_end: socket.socket, report: Reporter) -> None:
    """Each call's result is judged here where the job holds the expected ones (``expect``:
    compared as EvalPlus compares, :func:`evalplus_equal`, under its tolerance from the
    first of the calls whose result is expected to be floats, ``floats``, that returned), and
    a job that ends at its first failure ends at the first wrong one; else it crosses to the
    host as itself when short, or as a digest."""
    requests: list[bytes] = job["calls"]  # JSON texts, as the host made them: sent unread
    expect: list[bytes] | None = job.get("expect")  # the expected results' JSON texts
    floats = frozenset(job.get("floats", ()))
    atol = [float(job.get("atol", 0.0))]
    inline = min(INLINE_VALUE, max(2 * DIGEST_BYTES, report.limit - 100))

    def short(data: JSON) -> bool:
        """Whether an answer's value crosses to the host as itself (the host decodes it: a
        wrong result if it is no value)."""
        t = type(data)  # a number as JSON reads it is short: no need to measure it
        if (t is int and -_WIDE < data < _WIDE) or t is float or t is bool or data is None:
            return True
        return len(dumps(data)) <= inline

    def judged(channel: Channel, index: int, text: bytes, expected: bytes) -> Record:
        """A call's answer ``text`` against the expected result's JSON text: one encoded
        alike is equal (but a NaN's, or an iterator's, :data:`UNEQUAL_ALIKE`), with no more
        reading; any other is read and compared."""
        alike = text == b'{"ok": ' + expected + b"}"
        alike = alike and not any(tag in expected for tag in UNEQUAL_ALIKE)
        data = None if alike else channel.taken(text)  # an answer that is no value raises
        channel.clean = True
        if index in floats and not atol[0]:  # EvalPlus's tolerance, once a float came back
            atol[0] = FLOATS_ATOL
        if alike or evalplus_equal(
            channel.value(data), decode(loads(expected), namedtuples=NAMEDTUPLES), atol[0]
        ):
            return {"status": "passed"}
        return {"status": "failed", "detail": "wrong result"}

    def call(box: list[Channel], index: int) -> Record:
        channel = box[0]
        if expect is not None:
            return judged(channel, index, channel.answer(framed(requests[index])), expect[index])
        data = channel.exchange(framed(requests[index]))
        if short(data):
            return {"status": "returned", "value": data}
        return {"status": "returned", "digest": value_digest(encode(channel.value(data)))}

    tests: list[Callable[[list[Channel]], Record]] = [
        functools.partial(call, index=index) for index in range(len(requests))
    ]
    run_loaded(tests, t_end, job["timeout"], report, bool(job.get("stop_at_first_failure")))


PASSES = ("passed", "returned")
"""A test's status when it passed (asserts, judged calls) or its call returned a value."""


def run_loaded(
    tests: list[Callable[[list[Channel]], Record]],
    t_end: socket.socket,
    timeout: float,
    report: Reporter,
    stop_at_first_failure: bool = False,
) -> None:
    """The tests in order, each against a process that has loaded the candidate's code. A
    fork per test is the cost of a call-heavy row, so a process answers test after test for
    as long as it answers every request of each with a value (:attr:`Channel.clean`) and no
    other thread of its works on past a test (:meth:`Channel.settled`); after a test in which
    it did not (it raised, reached a ban, ran out of time, sent what T could not read, or
    ended) it is ended, and the next test gets a fresh one from the zygote: no test sees what
    a previous one left of a raise or a timeout. T's own verdict on the values (an
    ``assert`` that fails) changes nothing in that process and is not told to it: ending it
    then would tell the candidate which of its answers were wrong. Each test's clock is its
    process's CPU time from where the previous test's clock stopped (for a fresh process, the
    end of its load), so every cycle of its threads counts toward a test.

    A load that fails in the first test's process is the code's load error (no test runs);
    in a later one, that test's failure. With ``stop_at_first_failure`` (all-or-nothing
    scoring), no test runs after one that did not pass (or return). The first test's process
    is asked for already (:func:`request_child`)."""
    box: list[Channel] = []
    requested = True
    try:
        for index, test in enumerate(tests):
            found = judge(test, t_end, timeout, loads=True, box=box, requested=requested)
            requested = False
            if found["status"] == "load_error":
                if index == 0:
                    report.emit({"load_error": found["detail"], "timeout": found["timeout"]})
                    return
                status = "timeout" if found["timeout"] else "error"
                found = {"status": status, "detail": f"loading the code: {found['detail']}"}
            report.emit({"test": index, **found})
            if stop_at_first_failure and found["status"] not in PASSES:
                return
    finally:
        if box:
            end_child(box[0])


def judge(
    test: Callable[[list[Channel]], Record],
    t_end: socket.socket,
    timeout: float,
    wall: float | None = None,
    *,
    loads: bool = False,
    box: list[Channel] | None = None,
    requested: bool = False,
) -> Record:
    """Run one test against a fresh child (which first ``loads`` the candidate's code), or
    against the one a previous test left in ``box``; the verdict is T's alone. The child is
    ended after the test, unless it is left in ``box`` for the next one (where the test got a
    value for each of its requests, and it settled: :func:`run_loaded`)."""
    box = [] if box is None else box
    loaded = bool(box)
    try:
        if not box:
            pid, channel = child_channel(t_end, timeout, wall, requested)
            box.append(channel)
            if loads:
                await_load(channel, pid)
                loaded = True
        channel = box[0]
        record = test(box)
        if channel.banned:  # however the test took it
            return {"status": "banned", "detail": channel.banned}
        return record
    except LoadFailed as exc:
        return {"status": "load_error", "detail": str(exc), "timeout": exc.timeout}
    except TimeUp as exc:
        return {"status": "timeout", "limit": exc.limit, "detail": str(exc)}
    except Banned as exc:
        return {"status": "banned", "detail": str(exc)}
    except OutputLimit as exc:
        return {"status": "output_limit", "detail": str(exc)}
    except (RemoteError, CodecError) as exc:
        return {"status": "error", "detail": str(exc)}
    except Exception as exc:  # AssertionError and whatever else the test raised
        return {"status": "failed", "detail": exception_line(exc)}
    finally:
        kept = loaded and box[0].clean and not box[0].banned and box[0].settled()
        if box and not kept:
            end_child(box.pop())


def end_child(channel: Channel) -> None:
    with contextlib.suppress(OSError):
        os.kill(channel.clock.pid, signal.SIGKILL)
    for sock in (channel.sock, channel.exit_sock, channel.stderr):
        if sock is not None:
            sock.close()
    channel.threads.close()


class OutputLimit(Exception):
    """A program wrote more than its output limit."""


STDERR_TAIL = 300
"""Characters of a failed program's stderr kept for its outcome's detail."""


def run_stdio(job: Record, t_end: socket.socket, report: Reporter) -> None:
    """Each input runs the candidate as a whole program in a fresh process. Its output
    crosses to the host as a digest of its tokens (``compare``: ``tokens`` or
    ``tokens_nocase``), or itself, compressed, for a checker there (``output``), paid out of
    the bytes of the exec's output no record is promised (:meth:`Reporter.spend`)."""
    compare = job.get("compare", "tokens")
    for index, stdin_text in enumerate(job["inputs"]):

        def run(box: list[Channel], data: bytes = stdin_text.encode()) -> Record:
            channel = box[0]
            out, err = collect(channel, data, job.get("output_cap", 1 << 20))
            exit_code, rss, cpu = ended(channel)
            if cpu is not None and cpu >= channel.clock.limit:
                # The clock looks only now and then: what a program used since its last look
                # (many threads, on more CPUs than this process may use) counts all the same.
                raise TimeUp("cpu", f"used more than {channel.clock.limit:g}s of CPU time")
            record: Record = {"status": "exited", "exit": exit_code, "rss": rss}
            if exit_code != 0 and err:
                record["stderr"] = err
            if compare != "output":
                record["digest"] = tokens_digest(out, compare == "tokens")
                return record
            import zlib

            packed = base64.b64encode(zlib.compress(out, 6)).decode()
            if not report.spend(len(packed) + len(', "output": ""')):
                raise OutputLimit(
                    "its output is over what an exec can send back to the host's checker"
                )
            record["output"] = packed
            return record

        found = judge(run, t_end, job["timeout"], job.get("wall"))
        report.emit({"test": index, **found}, keep=("output",))


def ended(channel: Channel) -> tuple[int | None, int | None, float | None]:
    """The program's exit status (``-N``: killed by signal N), peak memory (KiB) and CPU
    seconds, once its process has ended (its threads joined, within its time limit); None if
    the zygote could not say."""
    if channel.exit_sock is None:
        raise RemoteError("the candidate's process came without a channel for its exit status")
    sent = b""
    while True:
        channel.clock.wait([channel.exit_sock])
        try:
            chunk = channel.exit_sock.recv(64)
        except OSError:
            chunk = b""
        if not chunk:
            try:
                status, rss, cpu = sent.split()
                return int(status), int(rss), float(cpu)
            except ValueError:
                return None, None, None
        sent = (sent + chunk)[:48]


def collect(channel: Channel, data: bytes, cap: int) -> tuple[bytes, str]:
    """Feed the program its stdin and read its stdout (past ``cap`` bytes: :class:`OutputLimit`)
    until it ends, and the tail of its stderr."""
    sock, err = channel.sock, channel.stderr
    sock.setblocking(False)
    out, said = bytearray(), bytearray()
    if not data:
        sock.shutdown(socket.SHUT_WR)
    readers = [sock] if err is None else [sock, err]
    while True:
        ready = channel.clock.wait(readers, [sock] if data else [])
        if sock in ready and data:
            try:
                data = data[sock.send(data[:65536]) :]
            except BlockingIOError:
                pass
            except OSError:  # it stopped reading
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
        if err is not None and err in ready:
            try:
                chunk = err.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                said = (said + chunk)[-4 * STDERR_TAIL :]
            else:
                readers = [sock]
        if sock not in ready:
            continue
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            tail = said.decode("utf-8", "replace").strip()
            return bytes(out), tail[-STDERR_TAIL:]
        out += chunk
        if len(out) > cap:
            raise OutputLimit(f"wrote more than {cap} bytes of output")


def hold_run(directory: str) -> None:
    """Lock this run's directory for as long as the runner lives (the lock goes with it,
    however it ends), and remove the directories of runs whose runner is gone without
    removing them (killed at the exec's timeout)."""
    import fcntl
    import shutil

    lock = os.open(os.path.join(directory, ".lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # kept open: this process's until it ends
    parent = os.path.dirname(directory)
    for name in os.listdir(parent):
        other = os.path.join(parent, name)
        if not name.startswith("run-") or other == directory:
            continue
        try:
            held = os.open(os.path.join(other, ".lock"), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue  # not started yet, or not a run's: left alone
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its runner is alive
        finally:
            os.close(held)
        shutil.rmtree(other, ignore_errors=True)


ITEMS = {"asserts": "tests", "calls": "calls", "stdio": "inputs"}
"""Per kind of job, its list of tests, which cross after the job, one frame each: a limit per
test, not per job."""


PACE_GRACE = 1.0
"""Seconds a run may be behind the pace of its tests' CPU limits when a batch deadline cuts
it (processes started, records written) and still be cut through no doing of its own."""


def cut(job: Record, done: int, built: float | None) -> Record:
    """The record of a run cut short by its batch deadline (:class:`Cut`) after ``done``
    tests, its program built (loaded, for Python) at ``built``: a timeout of the test it was
    in where the run is behind the pace its CPU limits allow (it slept, or waited: an honest
    program within its limits would be further on), else ``cut``, the deadline's doing."""
    if built is None:  # still building: the compile's own limits are CPU time
        return {"cut": True}
    spent = time.monotonic() - built
    allowed = job["timeout"] * (done + 3) + PACE_GRACE  # loading a module, the test it is in
    if spent <= allowed:
        return {"cut": True}
    detail = f"{spent:.1f}s of wall-clock time for {done} tests, {allowed:.1f}s at their limits"
    return {"test": done, "status": "timeout", "limit": "pace", "detail": detail[:MIN_RECORD]}


def read_job(fd: int) -> Record:
    """The job, its tests read one frame each (in chunks: the zygote is forked already). A
    call's text is the request the candidate's process gets, kept as it came (T forwards it
    unread)."""
    frames = Frames(fd)
    job: Record = frames.read()
    count = range(int(job["count"]))
    if job["kind"] == "calls":
        job["calls"] = [frames.raw() for _ in count]
        if job.get("expect"):  # then the expected results, one frame each (read when needed)
            job["expect"] = [frames.raw() for _ in count]
    else:
        job[ITEMS[job["kind"]]] = [frames.read() for _ in count]
    return job


def main() -> None:
    started = time.monotonic()
    wall = os.environ.get(RUN_WALL_ENV)
    if wall:  # the host's word (its exec's limit): a batch deadline cuts this run short
        RUN_END.append(started + float(wall) - RUN_MARGIN)
    key_memory = read_key()
    first = read_frame(0)
    code, setup = first["code"], first.get("setup", "")
    program = first.get("program") if first.get("kind") == "stdio" else None
    run = None
    if program is not None and program.get("dir"):
        program["dir"] = os.path.abspath(program["dir"])  # the zygote works there
        try:
            try:
                os.makedirs(program["dir"], exist_ok=True)
                hold_run(program["dir"])
                run = prepare(program["native"], code, program)
            except OSError as exc:
                raise BuildError("sandbox", disk_full(exc.strerror or str(exc))) from None
        except BuildError as exc:  # found here, by T, before anything of the candidate ran
            report = Reporter(bytes.fromhex(key_memory[:].decode()))
            report.emit({"load_error": str(exc), "build": exc.kind})
            report.emit({"done": True})
            return
    make_undumpable()
    candidate = become_judge()
    if program is not None and run is not None and candidate is not None:  # the judge's alone
        limits = program["compile_limits"]
        program["pch_dir"] = precompiled(program["native"], code, run[1], limits)
    workdir = os.getcwd()
    zygote_pid, t_end = start_zygote(code, setup, program, run, first.get("bans"), candidate)
    # The working directory is the candidate's (it writes there): T leaves it as soon as its
    # zygote has it, so that no import of T's, and nothing a test opens by a relative path,
    # can reach what the candidate wrote.
    os.chdir("/")
    job = read_job(0)  # only now: the zygote never had the tests in its memory
    # Only now, in T alone: T forks nothing else (a fresh zygote is exec'd at once).
    report = Reporter(bytes.fromhex(key_memory[:].decode()), job["count"])
    key_memory.close()
    # A job of calls or asserts runs its first test in a process that loads the code: asked
    # for now (the zygote forks it once ready, a process it ends if it cannot compile the code).
    requested = job["kind"] in ("asserts", "calls") and job["count"] > 0
    built: float | None = None
    try:
        if requested:
            become = bool(job.get("stop_at_first_failure"))
            with contextlib.suppress(BrokenPipeError):  # a zygote that could not compile
                request_child(t_end, become)  # the code has ended: ``load`` reads why
            if become:
                again = {"code": code, "setup": setup, "bans": first.get("bans")}
                again["workdir"] = workdir
                RESTART.append(lambda: restart_zygote(t_end, again, candidate, job["timeout"]))
        limits = (program or {}).get("compile_limits")
        build_wall = limits["wall"] + PCH_CPU * WALL_FACTOR if limits else None
        loaded = load(t_end, zygote_pid, job["timeout"] * 2, build_wall)
        built = time.monotonic()
        if "load_error" in loaded:
            report.emit(
                {
                    "load_error": loaded["load_error"],
                    "timeout": bool(loaded.get("timeout")),
                    "build": loaded.get("build", ""),
                    "banned": bool(loaded.get("banned")),
                }
            )
        elif job["kind"] == "asserts":
            run_asserts(job, t_end, setup, report)
        elif job["kind"] == "calls":
            run_calls(job, t_end, report)
        else:
            run_stdio(job, t_end, report)
    except Cut:
        report.emit(cut(job, report.tests, built))
    finally:
        for pid in (zygote_pid, *ZYGOTES):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if program is not None and program.get("dir"):
            import shutil

            # The files are the candidate's uid's: removed with its file access (an effective
            # uid alone: no process of that uid can signal T, which its real and saved uids
            # decide).
            if candidate is not None:
                os.seteuid(candidate[0])
            shutil.rmtree(program["dir"], ignore_errors=True)
            if candidate is not None:
                os.seteuid(0)
    report.emit({"done": True})


if __name__ == "__main__":
    main()
