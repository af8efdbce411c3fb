"""The Daytona backend's exec wrapper: the shell command it sends for each exec, the command
that kills one, and the layout of the wrapper's answer.

The backend writes these and parses the answer; the Daytona emulator reads the commands back
(to run a wrapped Python program directly) and answers in the same layout. Both import this
module, so the format has one definition; it needs only the standard library, so the emulator
runs without the Daytona SDK and the backend without the emulator's server libraries.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Sequence

MARK = "SBXK1"
"""Opens the wrapper's answer: ``MARK status timed_out``, then stdout in base64 lines,
:data:`STREAMS_SEPARATOR`, stderr in base64 lines."""
STREAMS_SEPARATOR = "."
NO_WORKDIR = "SBXK-WORKDIR"
"""The whole answer where the workdir cannot be created."""
NO_CWD = "SBXK-CWD"
"""The whole answer where the cwd is not a directory."""
ARGV_OPENS = "{ { ( exec "
"""What precedes the command's argv in the wrapper's script."""
ARGV_CLOSES = {True: ' ) <"$d/stdin" 3>&- & p=$!', False: " ) </dev/null 3>&- & p=$!"}
"""What follows the command's argv, by whether the command reads a stdin file."""
KILL_POLLS = 20
"""Times, 0.1 s apart, the kill command looks for the wrapper's FIFO before giving up."""


def wrap_command(
    argv: Sequence[str],
    *,
    workdir: str,
    cwd: str,
    scratch: str,
    has_stdin: bool,
    cap: int,
    timeout: float | None,
    inline_stdin: bytes | None = None,
) -> str:
    """The shell command that runs ``argv`` and reports status, stdout and stderr apart.

    ``has_stdin``: the command reads ``<scratch>/stdin``, uploaded before or, with
    ``inline_stdin``, written by the wrapper from the base64 it carries.

    A watchdog kills the command after ``timeout`` seconds and leaves a mark, so a timeout
    ends the wrapper normally, with the output so far, and with sub-second precision. The mark
    comes first: the wrapper kills the watchdog as soon as the command has ended, which on a
    loaded machine could fall between the kill and a mark made after it (a timeout reported
    as a plain 137). A
    workdir or cwd that an earlier program took the user's access to (``chmod 000``) gets it
    back, or every later exec of a pooled sandbox would fail. Every way out removes the
    scratch directory, an uploaded stdin with it.
    """
    q = shlex.quote
    write_stdin = ""
    if inline_stdin is not None:
        data = base64.b64encode(inline_stdin).decode()
        write_stdin = (
            f'printf %s {q(data)} | base64 -d >"$d/stdin" || {{ rm -rf "$d"; exit 125; }}\n'
        )
    watchdog = ":"
    if timeout is not None:
        watchdog = (
            f'( sleep {timeout:.3f}; : >"$d/t"; kill -9 "$p" 2>/dev/null || rm -f "$d/t" ) '
            "</dev/null >/dev/null 2>&1 3>&- & k=$!"
        )
    script = f"""d={q(scratch)} w={q(workdir)}
if [ ! -d "$w" ] && ! mkdir -p "$w" 2>/dev/null; then
  sudo -n sh -c 'mkdir -p "$1" && chown "$2" "$1"' sh "$w" "$(id -u):$(id -g)" >/dev/null 2>&1 \\
    || {{ echo {NO_WORKDIR}; rm -rf "$d"; exit 125; }}
fi
cd {q(cwd)} 2>/dev/null || {{ for x in "$w" {q(cwd)}; do [ ! -d "$x" ] || chmod u+rwx "$x"; done
  cd {q(cwd)}; }} 2>/dev/null || {{ echo {NO_CWD}; rm -rf "$d"; exit 125; }}
mkdir -p "$d" || exit 125
{write_stdin}k=
c() {{ head -c {cap + 1} >"$1"; cat >/dev/null; }}
{ARGV_OPENS}{shlex.join(argv)}{ARGV_CLOSES[has_stdin]}
    {watchdog}
    mkfifo "$d/k" && {{ read _ <"$d/k" && kill -9 "$p"; }} </dev/null >/dev/null 2>&1 3>&- & x=$!
    wait "$p" 2>/dev/null; echo $? >"$d/s"; kill "$x" 2>/dev/null
    [ -z "$k" ] || kill "$k" 2>/dev/null
  }} 2>&1 >&3 | c "$d/e"; }} 3>&1 | c "$d/o"
read s <"$d/s" || s=255
t=0; [ ! -e "$d/t" ] || t=1
echo {MARK} "$s" "$t"; base64 <"$d/o"; echo {STREAMS_SEPARATOR}; base64 <"$d/e"
rm -rf "$d"
exit "$s"
"""
    return shlex.join(["sh", "-c", script])


def kill_command(scratch: str) -> str:
    """The shell command that has the wrapper of the exec whose scratch directory this is kill
    its command: a line into the wrapper's FIFO (waiting up to two seconds for it to exist,
    and holding it open a second so that a reader still opening it gets the line). A FIFO
    rather than a pid: a provider may run each exec in a pid namespace of its own (as the
    emulators' local sandboxes do)."""
    fifo = shlex.quote(f"{scratch}/k")
    script = (
        f"i=0; while [ ! -p {fifo} ] && [ $i -lt {KILL_POLLS} ]; do sleep 0.1; i=$((i + 1)); done; "
        f"[ -p {fifo} ] || exit 0; exec 3<>{fifo}; echo >&3; sleep 1"
    )
    return shlex.join(["sh", "-c", script])
