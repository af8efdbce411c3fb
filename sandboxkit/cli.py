"""The ``sandboxkit`` command line (also ``python -m sandboxkit``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .emulators.faults import Faults

EMULATORS = {
    "daytona": "sandboxkit.emulators.daytona",
    "aviato": "sandboxkit.emulators.aviato",
}


def _emulate(args: argparse.Namespace) -> int:
    """Serve an emulator until interrupted; its module prints the URL to use."""
    module = importlib.import_module(EMULATORS[args.provider])
    faults = Faults(
        latency_ms=args.latency_ms,
        create_latency_ms=args.create_latency_ms,
        error_rate=args.error_rate,
        drop_rate=args.drop_rate,
        die_rate=args.die_rate,
        max_sandboxes=args.max_sandboxes,
        seed=args.seed,
    )
    result: int = module.serve_forever(
        host=args.host, port=args.port, api_key=args.api_key, faults=faults
    )
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandboxkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    emulate = sub.add_parser("emulate", help="serve a local emulator of a provider's API")
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
    emulate.add_argument("--seed", type=int, default=None)
    emulate.set_defaults(handler=_emulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
