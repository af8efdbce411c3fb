"""The trusted test runner that runs inside a sandbox (standard library only).

Shipped as source (``python3 -I -c <this file>``) and also imported by the host for its data
codec, so both ends share one definition of the wire format.

Why it is shaped like this: model-written code must not be able to raise its own score. The
candidate never runs in the process that judges it.

- The judge (this process, T) reads the candidate's code from stdin and forks a zygote (Z)
  *before* reading any test, then makes itself non-dumpable, so neither Z nor its children
  can read T's memory, open T's file descriptors through /proc, or ptrace it.
- Z closes everything it inherited, loads the candidate and, per test, forks a fresh child
  (C) that answers calls over a private socket. C's answers cross as plain data (exact types:
  an ``int`` subclass with a lying ``__eq__`` arrives as an opaque reference), so the tests,
  running in T with their own builtins, compare real values. The candidate never sees a test,
  an expected value or T's output channel; exiting early, killing T or faking output only
  ever makes tests fail.

Protocol. stdin: two frames, each ``<decimal length>\\n<JSON>``: first ``{"code", "setup"}``,
then the job ``{"kind": "asserts"|"calls"|"stdio", "timeout", ...}``. stdout: one JSON record
per line, ending with ``{"done": true}``.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import json
import math
import os
import select
import signal
import socket
import sys
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every run ~5 ms of imports; annotations are never evaluated
    from collections.abc import Callable
    from typing import Any, TypeAlias

    JSON: TypeAlias = Any
    """JSON-able data as the codec produces it."""
    Record: TypeAlias = dict[str, Any]
    Names: TypeAlias = dict[str, dict[str, Any]]

MAX_FRAME = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_ITEMS = 100_000
CANDIDATE_MODULE = "__sandboxkit_candidate__"


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


def encode(value: Any, refs: list[Any] | None = None, depth: int = 0) -> JSON:
    """To JSON-able data. Objects that are not plain data become references (into ``refs``)."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    # Subclasses of builtins are reduced to their builtin value through the builtin's own
    # methods, so an overridden __eq__, __str__ or __iter__ never reaches the judge.
    t = type(value)
    if value is None or t is bool:
        return value
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"$f": repr(number)}
    if isinstance(value, list):
        return [encode(v, refs, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$t": [encode(v, refs, depth + 1) for v in tuple.__iter__(value)]}
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


_TAGS: dict[str, Callable[[Any, Callable[[Any], Any]], Any]] = {
    "$t": lambda v, d: tuple(d(x) for x in v),
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
}


def _builtin(name: str) -> Any:
    value = getattr(builtins, name)
    if not isinstance(value, (type, types.BuiltinFunctionType)):
        raise CodecError(f"not a builtin: {name}")
    return value


def decode(data: JSON, channel: Channel | None = None, refs: list[Any] | None = None) -> Any:
    """From JSON-able data; builds only plain values (and references), never runs code."""

    def d(x: JSON) -> Any:
        t = type(x)
        if x is None or t is bool or t is int or t is str or t is float:
            return x
        if t is list:
            return [d(v) for v in x]
        if t is dict and len(x) == 1:
            ((tag, v),) = x.items()
            if tag == "$ref":
                if refs is not None:
                    return refs[v]
                return Ref(v, channel)
            if tag in _TAGS:
                return _TAGS[tag](v, d)
        raise CodecError(f"not a value: {x!r}")

    try:
        return d(data)
    except (TypeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        raise CodecError(f"bad value: {exc}") from None


# -- framing ----------------------------------------------------------------------------------


def read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Any:
    """One ``<length>\\n<JSON>`` frame, read unbuffered: nothing beyond it leaves the pipe."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 12:
            raise EOFError
        header += byte
    size = int(header)
    if size > MAX_FRAME:
        raise CodecError("frame too large")
    return json.loads(read_exact(fd, size))


def frame(obj: JSON) -> bytes:
    data = json.dumps(obj).encode()
    return b"%d\n" % len(data) + data


class RemoteError(Exception):
    """The candidate raised, exited or went silent during a call."""


class Channel:
    """T's end of the socket to one candidate child."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline

    def request(self, message: dict[str, Any]) -> Any:
        message = dict(message)
        for key in ("args", "kwargs"):
            if key in message:
                message[key] = encode(message[key])
        self.sock.sendall(frame(message))
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
            raise TimeoutError("the candidate did not answer in time")
        try:
            answer = read_frame(self.fd)
        except (EOFError, OSError, ValueError):
            raise RemoteError("the candidate's process ended during a call") from None
        if "raise" in answer:
            raise RemoteError(answer["raise"])
        return decode(answer["ok"], channel=self)


# -- the candidate side (zygote and children) ---------------------------------------------------


def exception_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")[:500]


def serve(sock: socket.socket, namespace: dict[str, Any]) -> None:
    """C: answer calls until T closes the socket."""
    refs: list[Any] = []
    fd = sock.fileno()
    while True:
        try:
            request = read_frame(fd)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        try:
            if "getattr" in request:
                result = getattr(refs[request["getattr"]], request["name"])
            elif "setattr" in request:
                (value,) = decode(request["args"], refs=refs)
                setattr(refs[request["setattr"]], request["name"], value)
                result = None
            else:
                target = request["call"]
                func = namespace[target] if type(target) is str else refs[target]
                args = decode(request.get("args", {"$t": []}), refs=refs)
                kwargs = decode(request.get("kwargs", {"$d": []}), refs=refs)
                result = func(*args, **kwargs)
            answer = {"ok": encode(result, refs)}
        except BaseException as exc:  # the candidate's own exception, SystemExit included
            answer = {"raise": exception_line(exc)}
        try:
            sock.sendall(frame(answer))
        except (TypeError, ValueError, RecursionError) as exc:
            sock.sendall(frame({"raise": "unsendable result: " + exception_line(exc)}))


def describe(namespace: dict[str, Any]) -> Names:
    """What T needs to bind the candidate's names: modules by name, data by value."""
    names: Names = {}
    for name, value in namespace.items():
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            names[name] = {"module": value.__name__}
        elif callable(value):
            names[name] = {"callable": True}
        else:
            try:
                names[name] = {"value": encode(value)}
            except (CodecError, RecursionError):
                names[name] = {"callable": True}
    return names


def zygote(ctl: socket.socket, code: str, setup: str) -> None:
    """Z: load the candidate once, then fork a fresh child per test on request."""
    namespace = {"__name__": CANDIDATE_MODULE, "__builtins__": __builtins__}
    try:
        exec(compile(code + "\n" + setup, "<candidate>", "exec"), namespace)
        ctl.sendall(frame({"loaded": describe(namespace)}))
    except BaseException as exc:
        ctl.sendall(frame({"load_error": exception_line(exc)}))
        os._exit(0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    fd = ctl.fileno()
    while True:
        try:
            read_frame(fd)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ctl.close()
            theirs.close()
            serve(mine, namespace)
        mine.close()
        socket.send_fds(ctl, [frame({"child": pid})], [theirs.fileno()])
        theirs.close()


# -- the judge (T) --------------------------------------------------------------------------------


def emit(record: Record) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def make_undumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def start_zygote(code: str, setup: str) -> tuple[int, socket.socket]:
    t_end, z_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        t_end.close()
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        keep = z_end.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 65536)
        zygote(z_end, code, setup)
        os._exit(0)
    z_end.close()
    return pid, t_end


def load(t_end: socket.socket, timeout: float) -> Record:
    if not select.select([t_end], [], [], timeout)[0]:
        return {
            "load_error": f"TimeoutError: loading the code took longer than {timeout:g}s",
            "timeout": True,
        }
    try:
        loaded: Record = read_frame(t_end.fileno())
        return loaded
    except (EOFError, ValueError):
        return {"load_error": "the code's process ended while loading"}


def child_channel(t_end: socket.socket, timeout: float) -> tuple[int, Channel]:
    """A fresh candidate child from the zygote (which the candidate controls: trust nothing)."""
    try:
        t_end.settimeout(timeout)
        t_end.sendall(frame({"fork": True}))
        msg, fds, _flags, _addr = socket.recv_fds(t_end, 256, 1)
        pid = int(json.loads(msg.split(b"\n", 1)[1])["child"])
        sock = socket.socket(fileno=fds[0])
    except Exception:
        raise RemoteError("the candidate's process could not start a test") from None
    return pid, Channel(sock, time.monotonic() + timeout)


def bind(names: Names, channel_box: list[Channel]) -> dict[str, Any]:
    """The candidate's names as T sees them: proxies, data, modules."""
    import importlib

    bound: dict[str, Any] = {}
    for name, info in names.items():
        if "module" in info:
            with contextlib.suppress(ImportError):
                bound[name] = importlib.import_module(info["module"])
        elif "value" in info:
            bound[name] = decode(info["value"])
        else:
            bound[name] = _proxy(name, channel_box)
    return bound


def _proxy(name: str, channel_box: list[Channel]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return channel_box[0].request({"call": name, "args": args, "kwargs": kwargs})

    call.__name__ = call.__qualname__ = name
    return call


def run_asserts(job: Record, t_end: socket.socket, names: Names, setup: str) -> None:
    for index, snippet in enumerate(job["tests"]):

        def test(box: list[Channel], snippet: str = snippet, index: int = index) -> Record:
            namespace: dict[str, Any] = {"__name__": "__main__", **bind(names, box)}
            exec(compile(setup, "<setup>", "exec"), namespace)
            exec(compile(snippet, f"<test {index}>", "exec"), namespace)
            return {"status": "passed"}

        emit({"test": index, **judge(test, t_end, job["timeout"])})


def run_calls(job: Record, t_end: socket.socket, names: Names) -> None:
    for index, (name, args) in enumerate(job["calls"]):

        def call(box: list[Channel], name: str = name, args: JSON = args) -> Record:
            value = box[0].request({"call": name, "args": decode(args)})
            return {"status": "returned", "value": encode(value)}

        emit({"test": index, **judge(call, t_end, job["timeout"])})


def judge(test: Callable[[list[Channel]], Record], t_end: socket.socket, timeout: float) -> Record:
    """Run one test against a fresh candidate child; the verdict is T's alone."""
    pid = None
    box: list[Channel] = []
    try:
        pid, channel = child_channel(t_end, timeout)
        box.append(channel)
        return test(box)
    except TimeoutError as exc:
        return {"status": "timeout", "detail": str(exc)}
    except (RemoteError, CodecError) as exc:
        return {"status": "error", "detail": str(exc)}
    except Exception as exc:  # AssertionError and whatever else the test raised
        return {"status": "failed", "detail": exception_line(exc)}
    finally:
        if pid is not None:
            end_child(pid, box[0] if box else None)


def end_child(pid: int, channel: Channel | None) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    if channel is not None:
        channel.sock.close()


def run_stdio(job: Record, code: str) -> None:
    """Each input runs the candidate as a whole program in a fresh process."""
    program = compile(code, "<candidate>", "exec")
    for index, stdin_text in enumerate(job["inputs"]):
        out_r, out_w = os.pipe()
        in_r, in_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.closerange(3, 65536)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 (lives until _exit)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            status = 0
            try:
                exec(program, {"__name__": "__main__", "__builtins__": __builtins__})
            except SystemExit as exc:
                status = exc.code if type(exc.code) is int else (0 if exc.code is None else 1)
            except BaseException:
                status = 1
            try:
                sys.stdout.flush()
            finally:
                os._exit(status)
        os.close(in_r)
        os.close(out_w)
        out, outcome = collect(pid, in_w, out_r, stdin_text.encode(), job)
        emit({"test": index, **outcome, "stdout": out.decode("utf-8", "replace")})


def collect(pid: int, in_w: int, out_r: int, data: bytes, job: Record) -> tuple[bytes, Record]:
    """Feed stdin and read capped stdout until the child exits or its time is up."""
    deadline = time.monotonic() + job["timeout"]
    cap = job.get("output_cap", 1 << 20)
    out = bytearray()
    os.set_blocking(in_w, False)
    writers = [in_w] if data else []
    if not data:
        os.close(in_w)
    readers = [out_r]
    while readers:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        readable, writable, _ = select.select(readers, writers, [], remaining)
        if writable:
            try:
                sent = os.write(in_w, data[:65536])
                data = data[sent:]
            except OSError:
                data = b""
            if not data:
                os.close(in_w)
                writers = []
        if readable:
            chunk = os.read(out_r, 65536)
            if not chunk:
                readers = []
            elif len(out) < cap:
                out += chunk[: cap - len(out)]
    timed_out = bool(readers)
    if writers:
        os.close(in_w)
    os.close(out_r)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    _, raw = os.waitpid(pid, 0)
    if timed_out:
        return bytes(out), {"status": "timeout"}
    code = os.waitstatus_to_exitcode(raw)
    return bytes(out), {"status": "exited", "returncode": code}


def main() -> None:
    first = read_frame(0)
    code, setup = first["code"], first.get("setup", "")
    make_undumpable()
    if first.get("kind") == "stdio":
        job = read_frame(0)
        run_stdio(job, code)
        emit({"done": True})
        return
    zygote_pid, t_end = start_zygote(code, setup)
    job = read_frame(0)  # only now: the zygote never had the tests in its memory
    loaded = load(t_end, job["timeout"] * 2)
    if "load_error" in loaded:
        emit({"load_error": loaded["load_error"], "timeout": bool(loaded.get("timeout"))})
    else:
        names = loaded["loaded"]
        if job["kind"] == "asserts":
            run_asserts(job, t_end, names, setup)
        else:
            run_calls(job, t_end, names)
    with contextlib.suppress(OSError):
        os.kill(zygote_pid, signal.SIGKILL)
    emit({"done": True})


if __name__ == "__main__":
    main()
