"""The smallest tour of sandboxkit: run untrusted code on the configured backend.

python examples/quickstart.py          # SANDBOXKIT_BACKEND picks the backend (default: local)
"""

from __future__ import annotations

import sys
import uuid

import sandboxkit

PROGRAMS = {
    "prints": "print(sum(range(10)))",
    "crashes": "1 / 0",
    "loops forever": "while True: pass",
}


def main() -> int:
    client = sandboxkit.get_backend()
    tier = getattr(getattr(client, "isolation", None), "tier", None)
    print(f"backend: {client.name}" + (f" (isolation: {tier.value})" if tier else ""))
    run_tag = f"quickstart-{uuid.uuid4().hex[:8]}"
    with client.sandbox(tags=[run_tag]) as sb:
        print(f"sandbox: {sb.id}, listed by tag: {[i.id for i in client.list(tags=[run_tag])]}")
        for name, code in PROGRAMS.items():
            sb.write_file("main.py", code)
            r = sb.exec(["python", "main.py"], timeout=2)
            last_err = r.stderr.strip().splitlines()[-1:] or [""]
            print(
                f"  {name:<14} exit={r.returncode:<4} timed_out={r.timed_out!s:<5} "
                f"stdout={r.stdout.strip()!r} stderr={last_err[0]!r}"
            )
    left = client.list(tags=[run_tag])
    print(f"sandboxes left after the with-block: {len(left)}")
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
