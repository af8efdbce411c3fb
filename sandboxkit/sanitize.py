"""Turn a model completion into a program to run, and flag constructs a task forbids.

Rewards call :func:`sanitize` once per completion and map ``Sanitized.problem`` to an outcome
before paying for a sandbox. Nothing here raises for what the model wrote: hostile or broken
input comes back as a :class:`Problem`.

The banned-construct checks are a *policy* check on source text, not a security boundary: they
stop a model from collecting reward for ``sorted(xs)`` in a "write your own sort" task, while the
sandbox is what contains the program. :func:`find_banned` documents what it cannot see.
"""

from __future__ import annotations

import ast
import enum
import io
import keyword
import re
import sys
import textwrap
import threading
import tokenize
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from .contest.languages import Language

Completion: TypeAlias = "str | Sequence[Mapping[str, Any]]"
"""What TRL passes a reward function: text, or chat messages (``{"role", "content"}``)."""

DEFAULT_MAX_BYTES = 64 * 1024

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_PYTHON_TAG = re.compile(r"py(?:thon)?[0-9.]*")
_IMPORT_PATTERN = re.compile(r"(?:import|from)\s+([^\W\d][\w.]*?)(?:\s.*)?")
_CALL_PATTERN = re.compile(r"((?:[^\W\d]\w*)?\.(?:[^\W\d]\w*\.)*)?([^\W\d]\w*)(\s*\()?")
"""``sorted(``, ``.sort(``, ``heapq.nsmallest(``, ``heapq``: (qualifier, name, call)."""
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")

# What reaches an arbitrary name, attribute or module at run time, so hides what it reaches.
_DYNAMIC_MODULES = {"builtins", "code", "codeop", "ctypes", "gc", "importlib", "inspect"}
_DYNAMIC_MODULES |= {"marshal", "pickle", "_pickle", "pkgutil", "runpy", "shelve", "types"}
_DYNAMIC_NAMES = {"__builtins__", "__import__", "__loader__", "__spec__", "globals", "locals"}
_DYNAMIC_NAMES |= {"vars"}
_DYNAMIC_ATTRS = {"__base__", "__bases__", "__builtins__", "__closure__", "__code__", "__dict__"}
_DYNAMIC_ATTRS |= {"__getattribute__", "__globals__", "__import__", "__loader__", "__mro__"}
_DYNAMIC_ATTRS |= {"__self__", "__subclasses__", "_getframe", "f_back", "f_builtins"}
_DYNAMIC_ATTRS |= {"f_globals", "f_locals", "gi_frame", "tb_frame", "meta_path", "modules"}
"""``print.__self__`` is the builtins module, ``sys.modules`` holds every module."""
# Modules that run code given as text, or resolve names given as text (``pydoc.locate``,
# ``logging.config``'s resolver), and the builtins module as other modules' attribute
# (``reprlib.builtins``, ``enum.bltns``) or a ``string.Formatter`` handing ``{0.so''rt}`` over.
_DYNAMIC_MODULES |= {"bdb", "cProfile", "doctest", "pdb", "profile", "pydoc", "timeit", "trace"}
_DYNAMIC_MODULES |= {"annotationlib", "imp", "_imp", "zipimport", "logging.config"}
_DYNAMIC_MODULES |= {"unittest.mock", "_interpreters", "_xxsubinterpreters"}
_DYNAMIC_ATTRS |= {"builtins", "bltns", "Formatter", "get_type_hints", "ForwardRef"}
# Other programs: a Python started with computed code is out of the check's sight.
_DYNAMIC_MODULES |= {"subprocess", "multiprocessing", "pty", "concurrent.interpreters"}
_DYNAMIC_ATTRS |= {"system", "popen", "executable", "fork", "forkpty", "posix_spawn"}
_DYNAMIC_ATTRS |= {"posix_spawnp", "create_subprocess_exec", "create_subprocess_shell"}
_DYNAMIC_ATTRS |= {
    verb + how for verb in ("exec", "spawn") for how in ("l", "le", "lp", "lpe", "v", "ve", "vp")
} | {"execvpe", "spawnvpe"}
_LITERAL_ARGS: Mapping[str, tuple[Literal["code", "attribute"], slice]] = {
    "eval": ("code", slice(0, 1)),
    "exec": ("code", slice(0, 1)),
    "compile": ("code", slice(0, 1)),
    "getattr": ("attribute", slice(1, 2)),
    "methodcaller": ("attribute", slice(0, 1)),
    "attrgetter": ("attribute", slice(0, None)),
}
"""Callables taking code or an attribute name as a string: literals are checked, others flagged."""


class ProblemKind(str, enum.Enum):
    """Why a completion should not (or need not) be run."""

    EMPTY = "empty"
    TOO_LARGE = "too_large"
    NUL_BYTES = "nul_bytes"
    SYNTAX_ERROR = "syntax_error"
    BANNED = "banned"


@dataclass(frozen=True)
class Problem:
    """One reason not to run a completion; rewards switch on ``kind``."""

    kind: ProblemKind
    reason: str
    """Human-readable, with the line when there is one."""
    line: int | None = None
    construct: str | None = None
    """For ``BANNED``: the name, attribute, module or pattern that was found."""


@dataclass(frozen=True)
class Sanitized:
    """The program to run (even when there is a problem, for logging) and what is wrong with it."""

    code: str
    problem: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def completion_text(completion: Completion) -> str:
    """The text of a completion; for chat messages, the last assistant message's text parts."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    part["text"]
                    for part in content
                    if isinstance(part, Mapping)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                )
            return ""
    return ""


def extract_code(
    completion: Completion,
    *,
    block: Literal["first", "last"] = "last",
    prompt: str | None = None,
    language: Language | None = None,
) -> str:
    """The program in a completion.

    With fenced blocks (backticks or tildes), ``block`` picks among the Python-tagged ones
    (``python``, ``py``, ``Python3``...), or among untagged ones if there are none; blocks in
    other languages are never taken, so a completion fencing only ``bash`` yields ``""``. An
    unterminated final fence (the model hit its token limit) counts as a block. Without fences
    the whole text is the code. With ``prompt``, the completion instead continues a function
    the prompt starts (HumanEval style): the result is ``prompt`` + :func:`function_body`.
    A ``language`` other than Python takes the blocks tagged with one of its names instead.
    """
    prefix, model, _ = _program(completion, block, prompt, language)
    return prefix + model


def block_tags(completion: Completion) -> list[str]:
    """The language tags of a completion's fenced blocks, lower case, in order ("" untagged)."""
    return [tag for tag, _ in _fenced_blocks(_clean(completion_text(completion)))]


def function_body(completion: Completion, prompt: str = "def _():\n") -> str:
    """The continuation of the function ``prompt`` leaves open, as far as it stays in that
    function: up to where Python's tokenizer closes it (the dedent out of its block, or the end
    of its line for a one-line body). That drops what models append (tests, ``__main__``
    blocks, new definitions) however it is laid out: form feeds, tabs, backslashes, strings
    over several lines. :func:`sanitize` says why a body that cannot be kept inside is none.
    """
    return _body(_newlines(prompt), _clean(completion_text(completion)))[0]


def banned_substrings(code: str, patterns: Collection[str]) -> tuple[str, ...]:
    """The patterns occurring in ``code``, case-insensitively, in the order given.

    Matches inside strings and comments too, and misses ``f = sorted``-style evasions; see
    :func:`find_banned` for a check that understands the code.
    """
    folded = code.casefold()
    return tuple(p for p in _strings(patterns) if p and p.casefold() in folded)


def pattern_bans(
    patterns: Collection[str],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``(names, attributes, modules)`` that substring patterns mean, for :func:`find_banned`.

    Who bans ``"sorted("`` bans the function, however it is reached: ``name(`` and a bare
    ``name`` give the name and the attribute (``reprlib.builtins.sorted``), ``.attr(`` and
    ``mod.attr(`` the attribute, ``import m``/``from m`` and a bare standard module's name
    the module, and the keyword alone (``"import "``) every module, ``"*"`` (so
    ``from\\tm\\timport\\tx`` is an import too). Other patterns (``"[::-1]"``) give nothing.
    """
    names: list[str] = []
    attributes: list[str] = []
    modules: list[str] = []
    for pattern in _strings(patterns):
        text = unicodedata.normalize("NFKC", pattern).strip()  # as Python reads identifiers
        if text in ("import", "from"):
            modules.append("*")
            continue
        imported = _IMPORT_PATTERN.fullmatch(text)
        if imported:
            modules.append(imported[1])
            continue
        called = _CALL_PATTERN.fullmatch(text)
        if not called or keyword.iskeyword(called[2]):
            continue
        dotted, name = called[1], called[2]
        attributes.append(name)
        if not dotted:
            names.append(name)
            if not called[3] and name in sys.stdlib_module_names:
                modules.append(name)
    return _strings(names), _strings(attributes), _strings(modules)


def find_banned(
    code: str,
    *,
    names: Collection[str] = (),
    attributes: Collection[str] = (),
    modules: Collection[str] = (),
) -> tuple[Problem, ...]:
    """Banned constructs in ``code``, by line; unparsable code gives one ``SYNTAX_ERROR`` problem.

    ``names`` are variables/builtins (``sorted``): any reference is flagged, so ``f = sorted``,
    a local ``def sorted`` and ``from m import sorted as s`` are too. ``attributes`` (``sort``)
    cover ``xs.sort()``, ``list.sort(xs)``, ``getattr(xs, "sort")``, ``methodcaller("sort")``,
    ``from m import sort`` and ``case list(sort=f)`` patterns. ``modules`` cover ``import m``,
    ``import m.sub`` and ``from m import x``; ``"*"`` every import. Names and attributes are
    separate: banning ``sorted`` does not ban ``.sort``.

    When anything is banned, ways to reach an arbitrary name, attribute or module at run time
    are flagged as well, since the check cannot follow them: ``eval``/``exec``/``compile`` of
    anything but a string literal (literals are checked as code, so ``eval(input())`` is
    flagged too), ``getattr`` with a computed name, ``__import__``, ``globals``/``locals``/
    ``vars``, ``__builtins__``, imports of ``builtins``/``importlib``/``pickle``/``inspect``/
    ``types``/``gc``/``ctypes``..., of modules that run or resolve text (``timeit``, ``pydoc``,
    ``pdb``, ``logging.config``...) or start programs (``subprocess``, ``multiprocessing``),
    introspection attributes (``__globals__``, ``__self__``, ``__dict__``, ``__subclasses__``,
    frame attributes, and ``.modules``/``.builtins`` on any object), ``typing``'s evaluators of
    annotations, ``string.Formatter``, ``os.system``/``popen``/``exec*``/``spawn*``,
    ``sys.executable``, and these callables referenced other than by a direct call
    (``g = getattr``).

    Not caught here: a program that writes a file and imports or runs it, code hidden in data
    the sandbox provides, and escape routes missing from the lists above; harnesses given the
    bans catch those as the code runs (``runner.enforce_bans``).
    """
    tree = _parse(code)
    if isinstance(tree, Problem):
        return (tree,)
    ban = _Ban(_strings(names), _strings(attributes), _strings(modules))
    found = {
        Problem(ProblemKind.BANNED, f"line {line}: {message}", line, construct): None
        for line, construct, message in _scan(tree, ban)
    }
    return tuple(sorted(found, key=lambda p: p.line or 0))


def sanitize(
    completion: Completion,
    *,
    prompt: str | None = None,
    block: Literal["first", "last"] = "last",
    names: Collection[str] = (),
    attributes: Collection[str] = (),
    modules: Collection[str] = (),
    substrings: Collection[str] = (),
    max_bytes: int = DEFAULT_MAX_BYTES,
    language: Language | None = None,
) -> Sanitized:
    """Extract the program (see :func:`extract_code`) and report its first problem.

    Checks run in order: empty, over ``max_bytes`` (UTF-8), NUL bytes, syntax, ``substrings``
    (:func:`banned_substrings`), then ``names``/``attributes``/``modules`` (:func:`find_banned`).
    With ``prompt`` only the model's part is held to the bans: a docstring saying "sorted(" is
    the task author's. Syntax is judged by this interpreter's grammar, which may be older than
    the sandbox's. A program in another ``language`` is taken from a block tagged with one of
    its names; its compiler judges it, and the checks after NUL bytes are Python's only.
    """
    prefix, model, escape = _program(completion, block, prompt, language, max_bytes)
    code = prefix + model
    if not model:
        return Sanitized(code, Problem(ProblemKind.EMPTY, "the completion contains no code"))
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        reason = f"the code is {size} bytes, over the limit of {max_bytes}"
        return Sanitized(code, Problem(ProblemKind.TOO_LARGE, reason))
    if language is not None and language.name != "python":
        if "\0" in code:
            return Sanitized(code, Problem(ProblemKind.NUL_BYTES, "the code contains NUL bytes"))
        return Sanitized(code, None)
    problems = find_banned(code, names=names, attributes=attributes, modules=modules)
    if problems and problems[0].kind is not ProblemKind.BANNED:
        return Sanitized(code, problems[0])
    if escape is not None:
        return Sanitized(code, escape)
    first_line = prefix.count("\n") + 1
    hits = banned_substrings(model, substrings)
    if hits:
        folded = model.casefold()
        line = first_line + folded[: folded.find(hits[0].casefold())].count("\n")
        reason = f"line {line}: contains banned text {hits[0]!r}"
        return Sanitized(code, Problem(ProblemKind.BANNED, reason, line, hits[0]))
    own = [p for p in problems if (p.line or 0) >= first_line]
    return Sanitized(code, own[0] if own else None)


def _program(
    completion: Completion,
    block: Literal["first", "last"],
    prompt: str | None,
    language: Language | None = None,
    max_chars: int | None = None,
) -> tuple[str, str, Problem | None]:
    """``(prefix, model_code, escape)``: the prompt's part (body mode only), the model's part,
    and in body mode why that part does not stay inside the prompt's function (a body is
    read no further than ``max_chars``: longer, it is too large wherever it ends)."""
    if block not in ("first", "last"):
        raise ValueError(f"block must be 'first' or 'last', not {block!r}")
    text = _clean(completion_text(completion))
    if prompt is not None:
        prompt = _newlines(prompt)
        body, escape = _body(prompt, text, max_chars)
        return prompt, body, escape
    blocks = _fenced_blocks(text)
    if not blocks:
        return "", _tidy(text), None
    if language is None or language.name == "python":
        chosen = [code for tag, code in blocks if _PYTHON_TAG.fullmatch(tag)]
    else:
        tags = {language.name, *language.names}
        chosen = [code for tag, code in blocks if tag in tags]
    chosen = chosen or [code for tag, code in blocks if not tag]
    if not chosen:
        return "", "", None
    return "", _tidy(chosen[0 if block == "first" else -1]), None


@dataclass(eq=False)
class _Def:
    """A function whose body has not ended yet, as the tokenizer sees it."""

    depth: int
    """How many blocks its ``def`` is in."""
    at: tuple[int, int]
    """Where its ``def`` (or ``async``) is: line and column, as the compiler reports it."""
    inline: bool = False
    """Whether its body is on the line of its ``def`` (ended by that line's end)."""


_LAYOUT = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE)


def _body(prompt: str, text: str, max_chars: int | None = None) -> tuple[str, Problem | None]:
    """The part of ``text`` that continues the function ``prompt`` leaves open (the outermost
    ``def`` whose body has not ended where the prompt does; else, module level), cut where
    the tokenizer ends that body; and why it is no body when the compiler, reading the
    prompt and the body, still finds code of ``text`` after that function."""
    source = prompt + text
    starts = [0, *(match.end() for match in re.finditer("\n", source)), len(source)]
    cut = len(source)
    ended = 0  # where the last logical line ended
    chosen: _Def | None = None
    opened: list[_Def] = []  # outermost first
    header: _Def | None = None  # a ``def`` whose header's colon has not come yet
    colon: _Def | None = None  # one whose colon just came: the next token says how it goes on
    depth = parens = 0
    new_line = True
    previous: tokenize.TokenInfo | None = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, (row, col) = token.type, token.start
            if max_chars is not None and starts[row - 1] + col > len(prompt) + max_chars:
                cut = starts[row - 1] + col  # too large already: no need to read on
                break
            if colon is not None and kind != tokenize.COMMENT:
                colon.inline = kind != tokenize.NEWLINE
                opened.append(colon)
                colon = None
            if kind == tokenize.INDENT:
                depth += 1
            elif kind == tokenize.DEDENT:
                depth -= 1
            elif kind == tokenize.NEWLINE:
                opened = [f for f in opened if not f.inline]
            elif kind not in _LAYOUT and new_line:  # the first token of a logical line
                opened = [f for f in opened if f.depth < depth]
            if chosen is None and starts[row - 1] + col >= len(prompt):
                chosen = opened[0] if opened else _Def(0, (0, 0))
            if chosen is not None and chosen.inline and kind == tokenize.NEWLINE:
                cut = starts[token.end[0] - 1] + token.end[1]  # the end of its one line
                break
            if chosen is not None and not chosen.inline and kind != tokenize.ENDMARKER:
                starting = kind == tokenize.DEDENT or (kind not in _LAYOUT and new_line)
                if starting and depth <= chosen.depth:  # a line out of its block
                    cut = ended  # after its last line of code (not the comments after that)
                    break
            if kind == tokenize.OP and token.string in "([{":
                parens += 1
            elif kind == tokenize.OP and token.string in ")]}":
                parens -= 1
            elif kind == tokenize.OP and token.string == ":" and header is not None and not parens:
                colon, header = header, None
            elif kind == tokenize.NAME and token.string == "def" and not parens:
                async_ = previous is not None and previous.string == "async"
                header = _Def(depth, previous.start if async_ and previous else (row, col))
            new_line = kind == tokenize.NEWLINE or (new_line and kind in _LAYOUT)
            if kind == tokenize.NEWLINE:
                ended = starts[token.end[0] - 1] + token.end[1]
            previous = token
    except (tokenize.TokenError, SyntaxError):
        pass  # not delimited: the whole text goes to the compiler, which judges it below
    body = source[len(prompt) : max(cut, len(prompt))].rstrip()
    if chosen is None or chosen.at == (0, 0):
        return body, None
    return body, _escape(prompt + body, chosen.at, len(prompt))


_PARSING = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """``ast.parse``, one thread at a time: CPython 3.11 and 3.12 count the AST constructor's
    depth in state the interpreter's threads share, so two threads parsing at once can fail
    with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905); a
    reward planning completions in one thread while another parses must not lose them."""
    with _PARSING:
        return ast.parse(source)


def _escape(code: str, at: tuple[int, int], start: int) -> Problem | None:
    """Why the program ``code`` has code of the model's (from offset ``start``) outside the
    function whose ``def`` is ``at``, as the compiler reads it; None when it has none, or
    when it does not compile (the syntax check says so)."""
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    line = code.count("\n", 0, start) + 1
    column = start - (code.rfind("\n", 0, start) + 1)
    function = next(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (node.lineno, node.col_offset) == at
        ),
        None,
    )
    end = (function.end_lineno or 0, function.end_col_offset or 0) if function else (0, 0)
    for node in ast.walk(tree):
        where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if where >= (line, column) and where > end:
            reason = f"line {where[0]}: the completion goes on after the function it continues"
            return Problem(ProblemKind.SYNTAX_ERROR, reason, where[0])
    return None


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(lowercase language tag, content)`` of each fenced block, CommonMark-style: a block
    closes at a fence of the same character at least as long, so ```` fences may nest ```."""
    lines = text.split("\n")
    blocks: list[tuple[str, str]] = []
    fence = tag = ""
    start = 0
    for i, line in enumerate(lines):
        match = _FENCE.fullmatch(line)
        if match is None:
            continue
        marker, info = match.groups()
        if not fence:
            fence, tag, start = marker, (info.split() or [""])[0].lower(), i + 1
        elif marker[0] == fence[0] and len(marker) >= len(fence) and not info.strip():
            blocks.append((tag, "\n".join(lines[start:i])))
            fence = ""
    if fence:
        blocks.append((tag, "\n".join(lines[start:])))
    return blocks


def _newlines(text: str) -> str:
    """LF line ends (Python reads ``\\r`` and ``\\r\\n`` as newlines too) and no leading BOM."""
    return text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")


def _clean(text: str) -> str:
    """:func:`_newlines` and no trailing chat end-of-turn markers left in by the decoding."""
    text = _newlines(text).rstrip()
    while text.endswith(_END_TOKENS):
        text = text[: text.rfind("<")].rstrip()
    return text


def _tidy(code: str) -> str:
    """Without the common indentation (fences inside markdown lists) or surrounding blank lines."""
    return textwrap.dedent(code).lstrip("\n").rstrip()


def _strings(values: Collection[str]) -> tuple[str, ...]:
    """A lone string is one value, not its characters: ``names="sorted"`` must not ban "s"."""
    return tuple(dict.fromkeys((values,) if isinstance(values, str) else values))


def _parse(code: str) -> ast.Module | Problem:
    if "\0" in code:
        line = code[: code.index("\0")].count("\n") + 1
        return Problem(ProblemKind.NUL_BYTES, f"line {line}: the code contains NUL bytes", line)
    try:
        return parse_python(code)
    except SyntaxError as exc:
        where = f"line {exc.lineno}: " if exc.lineno else ""
        return Problem(ProblemKind.SYNTAX_ERROR, f"{where}{exc.msg}", exc.lineno)
    except (ValueError, RecursionError, MemoryError) as exc:  # surrogates; nesting too deep
        reason = f"cannot be parsed: {type(exc).__name__} {exc}".rstrip()
        return Problem(ProblemKind.SYNTAX_ERROR, reason)


@dataclass(frozen=True)
class _Ban:
    names: tuple[str, ...]
    attributes: tuple[str, ...]
    modules: tuple[str, ...]

    def attribute(self, name: str) -> tuple[str, str] | None:
        if name in self.attributes:
            return name, f"uses banned attribute {name!r}"
        if name in _DYNAMIC_ATTRS:
            return name, f"uses {name!r}, which reaches other namespaces"
        return None

    def module(self, name: str) -> tuple[str, str] | None:
        if "*" in self.modules:
            return "*", f"imports {name!r} (the task bans imports)"
        for banned in self.modules:
            if name == banned or name.startswith(banned + "."):
                return banned, f"imports {name!r} (banned module {banned!r})"
        for dynamic in _DYNAMIC_MODULES:
            if name == dynamic or name.startswith(dynamic + "."):
                return dynamic, f"imports {name!r}, which reaches arbitrary code"
        return None


def _scan(tree: ast.AST, ban: _Ban) -> Iterator[tuple[int, str, str]]:
    """``(line, construct, message)`` for each banned or unfollowable construct in ``tree``."""
    if not (ban.names or ban.attributes or ban.modules):
        return
    nodes = list(ast.walk(tree))  # breadth-first: a call comes before its callee
    renamed = {
        alias.asname: alias.name
        for node in nodes
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname
    }
    called: set[int] = set()
    for node in nodes:
        line: int = getattr(node, "lineno", 0)
        callee = _callee(node, renamed)
        found: list[tuple[str, str] | None] = []
        if isinstance(node, ast.Import):
            found = [ban.module(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if node.level:  # relative: no module's name, so only "*" takes it
                    found.append(ban.module("." * node.level + (node.module or "")))
                elif node.module:
                    found.append(ban.module(f"{node.module}.{alias.name}"))
                if alias.name in ban.names:
                    found.append((alias.name, f"imports banned name {alias.name!r}"))
                found.append(ban.attribute(alias.name))
        elif isinstance(node, ast.Name):
            if node.id in ban.names:
                found = [(node.id, f"uses banned name {node.id!r}")]
            elif callee in ban.names:
                found = [(callee, f"uses {node.id!r}, an alias of banned name {callee!r}")]
            elif callee in _DYNAMIC_NAMES:
                found = [(node.id, f"uses {node.id!r}, which reaches other namespaces")]
        elif isinstance(node, ast.Attribute):
            found = [ban.attribute(node.attr)]
        elif isinstance(node, ast.MatchClass):  # `case list(sort=f)` is getattr(subject, "sort")
            found = [ban.attribute(name) for name in node.kwd_attrs]
        elif isinstance(node, ast.Call):
            name = _callee(node.func, renamed)
            if name is not None and name in _LITERAL_ARGS:
                called.add(id(node.func))
                found = list(_literal_args(node, name, ban))
        if callee is not None and callee in _LITERAL_ARGS and id(node) not in called:
            found.append((callee, f"uses {callee!r} other than by calling it"))
        yield from ((line, *hit) for hit in found if hit)


def _literal_args(call: ast.Call, name: str, ban: _Ban) -> Iterator[tuple[str, str]]:
    """Check the string literals a code- or attribute-taking call gets; flag anything else."""
    kind, where = _LITERAL_ARGS[name]
    args = [a.value if isinstance(a, ast.Constant) else None for a in call.args[where]]
    if not args or not all(isinstance(value, str) for value in args):
        what = "computed code" if kind == "code" else "a computed attribute name"
        yield name, f"passes {name!r} {what}, which cannot be checked"
    for value in args:
        if not isinstance(value, str):
            continue
        if kind == "attribute":
            yield from filter(None, map(ban.attribute, value.split(".")))
            continue
        inner = _parse(value)
        if isinstance(inner, Problem):
            yield name, f"passes unparsable code to {name!r}"
            continue
        for _, construct, message in _scan(inner, ban):
            yield construct, f"{message}, in the code passed to {name!r}"


def _callee(node: ast.AST, renamed: Mapping[str, str]) -> str | None:
    """The builtin-ish name ``node`` refers to: ``s`` after ``from m import sorted as s`` is
    ``sorted``; only ``methodcaller``/``attrgetter`` are recognised as attributes (``operator.``),
    so ``model.eval()`` is not ``eval``."""
    if isinstance(node, ast.Name):
        return renamed.get(node.id, node.id)
    if isinstance(node, ast.Attribute) and node.attr in ("methodcaller", "attrgetter"):
        return node.attr
    return None
