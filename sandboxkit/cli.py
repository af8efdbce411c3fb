"""The ``sandboxkit`` command line (also ``python -m sandboxkit``).

Each subcommand is a thin shell over the library (``Session``, ``get_backend``, the reward
factories), so what the command line does is what a training run would do.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from .config import child_pythonpath
from .emulators import EMULATORS, load_emulator
from .errors import SandboxError
from .portal import run_sync
from .protocol import SandboxInfo, SandboxStatus, shell_returncode
from .registry import get_backend
from .session import Session
from .testing.faults import Faults

if TYPE_CHECKING:
    from .backends.subprocess import SubprocessBackend

logger = logging.getLogger("sandboxkit.cli")

CLI_TAG = "sandboxkit-cli"
"""Tag key on sandboxes the command line creates (``sandboxkit-cli=run``, ``=eval``)."""
TIMEOUT_STATUS = 124
"""Exit status of ``run`` when the program ran past ``--timeout`` (as timeout(1))."""
FAILURE_STATUS = 125
"""Exit status of ``run`` when sandboxkit, not the program, failed (as docker run)."""
STOP_CONCURRENCY = 16


class UsageError(Exception):
    """A mistake in the command line or its input files: exit status 2, no traceback."""


# -- shared helpers -----------------------------------------------------------------------


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``2h``, ``1d``, or plain seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 15m, 2h or 1d")
    return timedelta(seconds=float(match[1]) * _UNITS[match[2] or "s"])


def format_age(started: datetime | None, now: datetime | None = None) -> str:
    if started is None:
        return "?"
    seconds = max(0.0, ((now or datetime.now(timezone.utc)) - started).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _describe(info: SandboxInfo) -> str:
    return f"{info.id}  age {format_age(info.started_at)}  tags {','.join(info.tags) or '-'}"


def _count(n: int) -> str:
    return f"{n} sandbox" + ("" if n == 1 else "es")


def _progress() -> bool:
    """Progress bars only where someone watches: a terminal on stderr."""
    return sys.stderr.isatty()


# -- doctor -------------------------------------------------------------------------------


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    return run_doctor(args.backend, args.timeout, args.json)


# -- run ----------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    """Run one program in a fresh sandbox; the session stops it however this ends."""
    if args.file == "-":
        source, name = sys.stdin.read(), "main.py"
    else:
        try:
            source = Path(args.file).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        name = Path(args.file).name if args.file.endswith(".py") else "main.py"
    try:
        with Session(args.backend, tags=[f"{CLI_TAG}=run"]) as session:
            sandbox = session.sandbox(image=args.image)
            logger.info("running %s in %s (%s)", name, sandbox.id, session.run_tag)
            sandbox.write_file(name, source)
            result = sandbox.exec(["python3", name], timeout=args.timeout)
            logger.info(
                "%s: exit %s in %.2f s%s",
                sandbox.id,
                result.returncode,
                result.duration,
                ", timed out" if result.timed_out else "",
            )
    except SandboxError as exc:
        print(f"sandboxkit: {type(exc).__name__}: {exc}", file=sys.stderr)
        return FAILURE_STATUS
    # The protocol returns output when the command ends, so it is printed then, not streamed.
    sys.stdout.buffer.write(result.stdout_bytes)
    sys.stdout.flush()
    sys.stderr.buffer.write(result.stderr_bytes)
    if result.truncated:
        print("sandboxkit: output truncated at the backend's cap", file=sys.stderr)
    if result.timed_out:
        print(f"sandboxkit: timed out after {args.timeout:g} s", file=sys.stderr)
        return TIMEOUT_STATUS
    return shell_returncode(result.returncode)


# -- ls and reap --------------------------------------------------------------------------


def _ls(args: argparse.Namespace) -> int:
    with get_backend(args.backend) as client:
        found = client.list(tags=args.tag, status=args.status)
    if not found:
        print("no sandboxes")
        return 0
    now = datetime.now(timezone.utc)
    oldest_first = sorted(found, key=lambda i: (i.started_at is None, i.started_at or now))
    rows = [("ID", "STATUS", "AGE", "TAGS")]
    rows += [
        (i.id, i.status.value, format_age(i.started_at, now), ",".join(i.tags) or "-")
        for i in oldest_first
    ]
    print(_table(rows))
    return 0


async def _stop_all(session: Session, found: Sequence[SandboxInfo]) -> int:
    """Stop with bounded concurrency and a progress bar; the number that could not be."""
    limit = asyncio.Semaphore(STOP_CONCURRENCY)
    failed = 0
    with tqdm(total=len(found), desc="stopping", unit="sb", disable=not _progress()) as bar:

        async def one(info: SandboxInfo) -> None:
            nonlocal failed
            async with limit:
                try:
                    await session.astop_sandbox(info.id)
                except Exception as exc:
                    failed += 1
                    tqdm.write(f"could not stop {info.id}: {exc}", file=sys.stderr)
                else:
                    tqdm.write(f"stopped {_describe(info)}", file=sys.stdout)
                bar.update()

        await asyncio.gather(*(one(info) for info in found))
    return failed


def _reap(args: argparse.Namespace) -> int:
    if not args.tag and not args.all:
        raise UsageError("reap needs --tag (or --all, to stop every sandbox the backend lists)")
    session = Session(args.backend, handle_signals=False)
    try:
        # Session.reap chooses what to stop; stopping one by one here gives the progress bar.
        found = session.reap(
            tags=args.tag, older_than=args.older_than, dry_run=True, all_sandboxes=args.all
        )
        local = _local_backend(session)
        leftovers = run_sync(local.leftovers()) if local is not None else []
        if args.dry_run:
            for info in found:
                print(f"would stop {_describe(info)}")
            for name in leftovers:
                print(f"would delete half-stopped {name}")
            print(f"{_count(len(found))} would be stopped{_and_deleted(leftovers)} (dry run)")
            return 0
        failed = run_sync(_stop_all(session, found))
        deleted = _delete_leftovers(local, leftovers) if local is not None else []
    finally:
        session.close()
    failed_total = failed + len(leftovers) - len(deleted)
    print(
        f"stopped {_count(len(found) - failed)}{_and_deleted(deleted)}"
        + (f", {failed_total} failed" if failed_total else "")
    )
    return 1 if failed_total else 0


def _local_backend(session: Session) -> SubprocessBackend | None:
    """The local backend, whose stopped sandboxes can leave directories behind that reap
    deletes whatever their tags (no other backend leaves anything the client could find)."""
    from .backends.subprocess import SubprocessBackend

    backend = session.client.backend
    return backend if isinstance(backend, SubprocessBackend) else None


def _delete_leftovers(local: SubprocessBackend, leftovers: Sequence[str]) -> list[str]:
    deleted = []
    for name in leftovers:
        try:
            run_sync(local.remove_leftover(name))
        except SandboxError as exc:
            print(f"could not delete {name}: {exc}", file=sys.stderr)
        else:
            print(f"deleted half-stopped {name}")
            deleted.append(name)
    return deleted


def _and_deleted(leftovers: Sequence[str]) -> str:
    return f", {len(leftovers)} half-stopped deleted" if leftovers else ""


# -- eval and bench -----------------------------------------------------------------------


def _eval(args: argparse.Namespace) -> int:
    from .evalfile import EvalInputError, run_eval

    try:
        return run_eval(args, tags=[f"{CLI_TAG}=eval"])
    except EvalInputError as exc:
        raise UsageError(str(exc)) from None


def find_benchmarks(directory: str | None = None) -> Path:
    """The repository's ``benchmarks/`` (next to the package), which wheels do not ship."""
    found = Path(directory) if directory else Path(__file__).resolve().parent.parent / "benchmarks"
    if not found.is_dir():
        raise UsageError(
            f"no benchmarks at {found}: they live in the sandboxkit repository, not in the "
            "installed package; run this from a checkout (pip install -e .) or pass --dir"
        )
    return found


def _bench(args: argparse.Namespace) -> int:
    """Run the quick benchmark as its own process, with this interpreter and this package.

    The benchmark stops its sandboxes on its way out, so it is left to finish: Ctrl-C reaches
    it from the terminal (this process ignores it rather than kill it mid-cleanup, as
    ``subprocess.run`` would), and a SIGTERM is passed on to it."""
    directory = find_benchmarks(args.dir)
    extra = list(args.args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if not (directory / "run.py").is_file():
        raise UsageError(f"{directory} has no run.py")
    argv = [str(directory / "run.py"), *(extra or ["--quick"])]
    if args.out:
        argv += ["--json", args.out]
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    logger.info("running %s", " ".join(argv))
    child = subprocess.Popen([sys.executable, *argv], env=env)
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, _: child.send_signal(signum)),
    }
    try:
        return shell_returncode(child.wait())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# -- emulate ------------------------------------------------------------------------------


def _emulate(args: argparse.Namespace) -> int:
    """Serve an emulator until interrupted; its module prints the URL to use."""
    module = load_emulator(args.provider)
    faults = Faults(
        latency_ms=args.latency_ms,
        create_latency_ms=args.create_latency_ms,
        error_rate=args.error_rate,
        drop_rate=args.drop_rate,
        die_rate=args.die_rate,
        max_sandboxes=args.max_sandboxes,
        max_concurrent_execs=args.max_concurrent_execs,
        retry_after=args.retry_after,
        seed=args.seed,
    )
    result: int = module.serve_forever(
        host=args.host, port=args.port, api_key=args.api_key, faults=faults
    )
    return result


# -- the parser ---------------------------------------------------------------------------


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandboxkit",
        description="Check backends, run programs in sandboxes, list and reap them, score "
        "completions. Details: docs/cli.md.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log INFO (-vv: DEBUG) to stderr"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=0, dest="sub_verbose", help=argparse.SUPPRESS
    )
    backend = argparse.ArgumentParser(add_help=False)
    backend.add_argument(
        "--backend", help="backend name (default: $SANDBOXKIT_BACKEND, else subprocess)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = sub.add_parser(
        "doctor", parents=[common, backend], help="check what each backend needs here"
    )
    doctor.add_argument("--timeout", type=_positive, default=5.0, help="seconds per probe")
    doctor.add_argument("--json", action="store_true", help="machine-readable report")
    doctor.set_defaults(handler=_doctor)

    run = sub.add_parser(
        "run", parents=[common, backend], help="run a Python program in a fresh sandbox"
    )
    run.add_argument("file", metavar="FILE", help="the program, or - to read it from stdin")
    run.add_argument("--timeout", type=_positive, default=60.0, help="seconds (exit 124 past it)")
    run.add_argument("--image", help="container image (remote backends)")
    run.set_defaults(handler=_run)

    ls = sub.add_parser("ls", parents=[common, backend], help="list sandboxes")
    ls.add_argument("--tag", action="append", default=[], help="only with this tag (repeatable)")
    ls.add_argument("--status", choices=[s.value for s in SandboxStatus])
    ls.set_defaults(handler=_ls)

    reap = sub.add_parser(
        "reap",
        parents=[common, backend],
        help="stop sandboxes that crashed runs left behind",
        description="Stop sandboxes that crashed runs left behind. On the local backend, also "
        "delete the directories of sandboxes stopped half-way, whatever their tags.",
    )
    reap.add_argument("--tag", action="append", default=[], help="with this tag (repeatable)")
    reap.add_argument(
        "--older-than", type=parse_duration, help="started before this long ago: 30s, 15m, 2h, 1d"
    )
    reap.add_argument("--dry-run", action="store_true", help="list what would be stopped")
    reap.add_argument("--all", action="store_true", help="allow reaping without --tag")
    reap.set_defaults(handler=_reap)

    evaluate = sub.add_parser(
        "eval", parents=[common, backend], help="score a JSONL file of completions"
    )
    evaluate.add_argument("file", metavar="FILE.jsonl")
    evaluate.add_argument(
        "--reward",
        choices=["exec", "assert", "function", "stdio"],
        default="assert",
        help="exec_reward, assert_tests_reward (default), function_tests_reward or "
        "stdio_tests_reward",
    )
    evaluate.add_argument("--timeout", type=_positive, default=5.0, help="seconds per test")
    evaluate.add_argument(
        "--language", help="stdio: the programs' language where a row names none (cpp17, java...)"
    )
    evaluate.add_argument("--pool-size", type=int, default=4, help="sandboxes at once")
    evaluate.add_argument(
        "--retries", type=int, default=3, help="tries again after a provider failure"
    )
    evaluate.add_argument("--image", help="container image (remote backends)")
    evaluate.add_argument("--output", help="write one JSON line per row here")
    evaluate.set_defaults(handler=_eval)

    bench = sub.add_parser("bench", parents=[common], help="run the quick benchmark")
    bench.add_argument("--dir", help="the benchmarks directory (default: the repository's)")
    bench.add_argument(
        "--out", help="where to write the results (default: ~/.cache/sandboxkit/bench/)"
    )
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(handler=_bench)

    emulate = sub.add_parser(
        "emulate", parents=[common], help="serve a local emulator of a provider's API"
    )
    emulate.add_argument("provider", choices=sorted(EMULATORS))
    emulate.add_argument("--host", default="127.0.0.1")
    emulate.add_argument("--port", type=int, default=0, help="0 picks a free port")
    emulate.add_argument("--api-key", default=None, help="require this bearer token")
    emulate.add_argument("--latency-ms", type=float, default=0.0)
    emulate.add_argument("--create-latency-ms", type=float, default=0.0)
    emulate.add_argument("--error-rate", type=float, default=0.0)
    emulate.add_argument("--drop-rate", type=float, default=0.0)
    emulate.add_argument("--die-rate", type=float, default=0.0)
    emulate.add_argument("--max-sandboxes", type=int, default=None)
    emulate.add_argument(
        "--max-concurrent-execs", type=int, default=None, help="refuse more execs at once (429)"
    )
    emulate.add_argument(
        "--retry-after", type=float, default=None, help="seconds its 429s ask clients to wait"
    )
    emulate.add_argument("--seed", type=int, default=None)
    emulate.set_defaults(handler=_emulate)
    return parser


def configure_logging(verbosity: int) -> None:
    """Quiet by default (warnings only); -v INFO, -vv DEBUG, for the ``sandboxkit`` logger."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    root = logging.getLogger("sandboxkit")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose + getattr(args, "sub_verbose", 0))
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        parser.exit(2, f"sandboxkit {args.command}: {exc}\n")
    except SandboxError as exc:
        print(f"sandboxkit {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
