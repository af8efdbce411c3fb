"""The languages contest programs come in: how each is compiled and run, in one table.

An entry is data the runner in the sandbox acts on (it never imports this module): the file the
source goes in, the compile command (none for interpreted languages), the run command, and how
its memory limit is set. Placeholders in commands: ``{source}`` (the file name), ``{stem}``
(the name without its extension: Java's class), ``{memory_mb}``, ``{stack_mb}``.
:func:`register_language` adds or replaces one, and its names (dataset ``language`` values and
fenced-block tags) find it through :func:`language_for`.

Python is the one entry without commands: its programs run in the runner's zygote (forked, not
started, per test), which is what makes them cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CONTEST_DEFINES = ("-DONLINE_JUDGE",)


@dataclass(frozen=True)
class Language:
    name: str
    """The canonical name (``cpp17``), what outcomes and ``doctor`` say."""
    title: str
    """For people: ``C++17``."""
    names: tuple[str, ...]
    """Other names it goes by, lower case: dataset ``language`` values and fence tags."""
    source: str = ""
    """The file the program is written to; empty for Python."""
    compile: tuple[str, ...] = ()
    """The compile command; empty when there is none."""
    run: tuple[str, ...] = ()
    toolchain: str = ""
    """The command the sandbox must have (named when it lacks it)."""
    install: str = ""
    """What a user installs for it (Debian's packages)."""
    memory_rlimit: bool = True
    """Whether the memory limit is ``RLIMIT_DATA`` (private writable memory of the process,
    so reserved address space does not count; the stack has its own limit). Off for runtimes
    that start threads of their own (the JVM, Node): glibc gives each thread a stack as large
    as the main one's limit, which counts; their own flags (``-Xmx``) bound them instead."""
    runtime_mb: int = 0
    """Memory the runtime itself takes (the JVM, V8), beyond the limit the program gets: a
    test whose peak memory passes the limit by more is ``memory_limit`` (what its own flags
    leave out: Node's typed arrays and young generation, Java's ``Unsafe``)."""
    precompiled_header: str = ""
    """A header (``bits/stdc++.h``) the sandbox precompiles once with the same flags and
    offers first on the include path."""
    class_pattern: str = ""
    """A regex whose first group names the file's stem (Java: the public class)."""
    env: Mapping[str, str] = field(default_factory=dict)
    epilogue: str = ""
    """Source appended to the program before it compiles (after it: its line numbers hold)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Files written beside the source (name: text), so that what the toolchain would look
    for in the directories above, where earlier completions in the sandbox could write (Node:
    the nearest ``package.json``, whose ``"type"`` decides how ``main.js`` loads), is the
    judge's own."""

    @property
    def compiled(self) -> bool:
        return bool(self.compile)

    def stem(self, code: str) -> str:
        default = self.source.rpartition(".")[0]
        if self.class_pattern:
            found = re.search(self.class_pattern, code, re.MULTILINE)
            if found:
                return found.group(1)
        return default

    def spec(self, code: str, *, memory_mb: int, stack_mb: int) -> dict[str, object]:
        """What the runner needs to build and run ``code``: file, commands and limits."""
        stem = self.stem(code)
        extension = self.source.rpartition(".")[2]
        values = {
            "source": f"{stem}.{extension}",
            "stem": stem,
            "memory_mb": memory_mb,
            "stack_mb": stack_mb,
        }

        def fill(argv: tuple[str, ...]) -> list[str]:
            return [arg.format(**values) for arg in argv]

        return {
            "language": self.title,
            "source": values["source"],
            "compile": fill(self.compile),
            "run": fill(self.run),
            "toolchain": self.toolchain,
            "install": self.install,
            "pch": self.precompiled_header,
            "env": dict(self.env),
            "memory": memory_mb << 20 if self.memory_rlimit else 0,
            "epilogue": self.epilogue,
            "files": dict(self.files),
        }


THREAD_STACK_MB = 8
GLIBC_THREAD_STACKS = f"""
#include <pthread.h>
#ifndef __cplusplus
extern int pthread_getattr_default_np(pthread_attr_t *);
extern int pthread_setattr_default_np(const pthread_attr_t *);
#endif
__attribute__((__constructor__)) static void sandboxkit_thread_stacks(void) {{
    pthread_attr_t sandboxkit_attr;
    if (pthread_getattr_default_np(&sandboxkit_attr) == 0) {{
        pthread_attr_setstacksize(&sandboxkit_attr, (size_t){THREAD_STACK_MB} << 20);
        pthread_setattr_default_np(&sandboxkit_attr);
        pthread_attr_destroy(&sandboxkit_attr);
    }}
}}
"""
"""C and C++ programs' epilogue: glibc sizes every thread's stack as the main thread's stack
limit (256 MiB for a program), and a thread's stack counts against ``RLIMIT_DATA``, so with
it one ``std::thread`` would not start under a 256 MB limit; threads get what a usual Linux
shell gives them (8 MiB) instead, the main thread keeps its large stack. Written to survive
what contest code does to the preprocessor (``#define int long long``)."""


def _gcc(compiler: str, standard: str) -> tuple[str, ...]:
    return (compiler, "-O2", f"-std={standard}", *CONTEST_DEFINES, "-pipe", "-o", "main")


_LANGUAGES: dict[str, Language] = {}
_NAMES: dict[str, str] = {}


def register_language(language: Language) -> None:
    """Add ``language`` (or replace the entry of that name); its names find it from now on."""
    _LANGUAGES[language.name] = language
    for name in (language.name, *language.names):
        _NAMES[name.lower()] = language.name


def language_for(name: str) -> Language | None:
    """The entry a dataset's language or a fence tag names (``"C++"``, ``"cpp"``,
    ``"Python 3"``, ``"java"``); None for a language not in the table."""
    key = re.sub(r"\s+", "", name.strip().lower())
    found = _NAMES.get(key)
    return _LANGUAGES[found] if found is not None else None


def languages() -> tuple[Language, ...]:
    return tuple(_LANGUAGES.values())


for _entry in (
    Language(
        "python",
        "Python 3",
        ("py", "py3", "python3", "pypy", "pypy3", "python3.11", "python3.12"),
        toolchain="python3",
    ),
    Language(
        "c",
        "C",
        ("gcc", "c11", "c17", "gnuc"),
        "main.c",
        (*_gcc("gcc", "gnu17"), "main.c", "-lm"),
        ("./main",),
        "gcc",
        "apt install gcc",
        epilogue=GLIBC_THREAD_STACKS,
    ),
    Language(
        "cpp17",
        "C++17",
        ("cpp", "c++", "cc", "cxx", "c++17", "gnu++17", "g++", "cpp14", "c++14", "c++11"),
        "main.cpp",
        (*_gcc("g++", "gnu++17"), "main.cpp"),
        ("./main",),
        "g++",
        "apt install g++",
        precompiled_header="bits/stdc++.h",
        epilogue=GLIBC_THREAD_STACKS,
    ),
    Language(
        "cpp20",
        "C++20",
        ("c++20", "gnu++20", "cpp2a"),
        "main.cpp",
        (*_gcc("g++", "gnu++20"), "main.cpp"),
        ("./main",),
        "g++",
        "apt install g++",
        precompiled_header="bits/stdc++.h",
        epilogue=GLIBC_THREAD_STACKS,
    ),
    Language(
        "java",
        "Java",
        ("java17", "java21", "java8"),
        "Main.java",
        ("javac", "-J-Xmx512m", "-J-XX:+UseSerialGC", "-encoding", "UTF-8", "-d", ".", "{source}"),
        (
            "java",
            "-Xmx{memory_mb}m",
            "-Xss{stack_mb}m",
            "-XX:+UseSerialGC",
            "-DONLINE_JUDGE=true",
            "-cp",
            ".",
            "{stem}",
        ),
        "javac",
        "apt install default-jdk-headless",
        memory_rlimit=False,
        runtime_mb=64,
        class_pattern=r"^\s*public\s+(?:final\s+)?class\s+([A-Za-z_]\w*)",
    ),
    Language(
        "rust",
        "Rust",
        ("rs", "rustc"),
        "main.rs",
        ("rustc", "-O", "--edition", "2021", "--cfg", "online_judge", "-o", "main", "main.rs"),
        ("./main",),
        "rustc",
        "apt install rustc",
    ),
    Language(
        "go",
        "Go",
        ("golang",),
        "main.go",
        ("go", "build", "-o", "main", "main.go"),
        ("./main",),
        "go",
        "apt install golang-go",
        env={"GOCACHE": "{dir}/.gocache", "GOPATH": "{dir}/.gopath", "GO111MODULE": "off"},
    ),
    Language(
        "javascript",
        "JavaScript (Node.js)",
        ("js", "node", "nodejs", "javascript(node.js)"),
        "main.js",
        (),
        ("node", "--stack-size=65500", "--max-old-space-size={memory_mb}", "main.js"),
        "node",
        "apt install nodejs",
        memory_rlimit=False,
        runtime_mb=64,
        files={"package.json": "{}\n"},
    ),
):
    register_language(_entry)
