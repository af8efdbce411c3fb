"""Tests for extraction and banned-construct checks; completions are written as a hostile model
would write them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sandboxkit.contest.languages import language_for
from sandboxkit.sanitize import (
    DEFAULT_MAX_BYTES,
    Problem,
    ProblemKind,
    Sanitized,
    _escape,
    banned_substrings,
    block_tags,
    completion_text,
    extract_code,
    find_banned,
    function_body,
    pattern_bans,
    sanitize,
)

F = "```"
WIDE_SORTED = "".join(chr(ord(c) + 0xFEE0) for c in "sorted")  # NFKC-equal to sorted

# --- extraction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (f"Here:\n{F}python\nprint(1)\n{F}\nDone.", "print(1)"),
        (f"{F}py\nprint(1)\n{F}", "print(1)"),
        (f"{F}Python3\nprint(1)\n{F}", "print(1)"),
        (f"{F}PYTHON\nprint(1)\n{F}", "print(1)"),
        (f"{F}python3.11\nprint(1)\n{F}", "print(1)"),
        (f"{F}python title='sol.py'\nprint(1)\n{F}", "print(1)"),
        (f"{F}\nprint(1)\n{F}", "print(1)"),
        ("~~~python\nprint(1)\n~~~", "print(1)"),
        ("~~~\nprint(1)\n~~~", "print(1)"),
        ("````python\nprint(1)\n````", "print(1)"),
        (f"  {F}python\n  def f():\n      return 1\n  {F}", "def f():\n    return 1"),
        (f"{F}python\n\n\nprint(1)\n\n   \n{F}", "print(1)"),
    ],
    ids=[
        "python",
        "py",
        "Python3",
        "upper",
        "versioned",
        "info-string",
        "bare",
        "tilde-python",
        "tilde-bare",
        "four-backticks",
        "indented-fence-dedented",
        "blank-lines-trimmed",
    ],
)
def test_fence_flavours(completion: str, expected: str) -> None:
    assert extract_code(completion) == expected


TWO_PY = f"{F}python\nfirst()\n{F}\ntext\n{F}python\nsecond()\n{F}"


@pytest.mark.parametrize(
    ("completion", "block", "expected"),
    [
        (TWO_PY, "last", "second()"),
        (TWO_PY, "first", "first()"),
        # A python-tagged block wins over bare and other-language blocks wherever they are.
        (f"{F}python\npy()\n{F}\n{F}\nbare()\n{F}", "last", "py()"),
        (f"{F}\nbare()\n{F}\n{F}python\npy()\n{F}", "first", "py()"),
        (f"{F}python\npy()\n{F}\n{F}bash\nls -l\n{F}", "last", "py()"),
        (f"{F}bash\npip install x\n{F}\n{F}\nbare()\n{F}", "last", "bare()"),
        (f"{F}\none()\n{F}\n{F}\ntwo()\n{F}", "first", "one()"),
        (f"{F}\none()\n{F}\n{F}\ntwo()\n{F}", "last", "two()"),
    ],
)
def test_block_selection(completion: str, block: Any, expected: str) -> None:
    assert extract_code(completion, block=block) == expected


def test_invalid_block_choice_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="block"):
        extract_code("x", block="middle")  # type: ignore[arg-type]


def test_only_other_language_fences_yield_no_code() -> None:
    completion = f"Run this:\n{F}bash\npython -c 'print(1)'\n{F}"
    assert extract_code(completion) == ""
    assert sanitize(completion).problem == Problem(
        ProblemKind.EMPTY, "the completion contains no code"
    )


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (f"{F}python\ndef f(x):\n    return x +", "def f(x):\n    return x +"),
        (f"{F}python\nfirst()\n{F}\n{F}python\nsecond(", "second("),
        (f"{F}python\nx = 1\n<|im_end|>", "x = 1"),
    ],
    ids=["only-block", "after-closed-block", "end-token"],
)
def test_unterminated_final_fence_still_yields_code(completion: str, expected: str) -> None:
    assert extract_code(completion) == expected


def test_longer_fence_nests_a_shorter_one() -> None:
    completion = f'````python\ndoc = """\n{F}python\nprint(1)\n{F}\n"""\n````'
    assert extract_code(completion) == f'doc = """\n{F}python\nprint(1)\n{F}\n"""'


def test_closing_fence_needs_the_same_character() -> None:
    completion = f"~~~python\ns = 1\n{F}\nt = 2\n~~~"
    assert extract_code(completion) == f"s = 1\n{F}\nt = 2"


def test_fence_with_info_string_does_not_close_a_block() -> None:
    completion = f"{F}python\na = 1\n{F}python\nb = 2\n{F}"
    assert extract_code(completion) == f"a = 1\n{F}python\nb = 2"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("\n\n  print(1)\n  print(2)\n\n", "print(1)\nprint(2)"),
        ("import sys\nprint(sys.argv)", "import sys\nprint(sys.argv)"),
        ("x = 1\n<|im_end|>\n", "x = 1"),
        ("x = 1<|endoftext|>", "x = 1"),
        ("x = 1 </s>  <|eot_id|>", "x = 1"),
        ("\ufeffprint(1)", "print(1)"),
        ("def f():\r\n    return 1\r\n", "def f():\n    return 1"),
        ("a = 1\rb = 2", "a = 1\nb = 2"),
        ("", ""),
        ("   \n\t\n", ""),
    ],
    ids=[
        "dedent-and-trim",
        "unchanged",
        "im-end",
        "endoftext",
        "several-tokens",
        "bom",
        "crlf",
        "lone-cr",
        "empty",
        "whitespace",
    ],
)
def test_plain_code(completion: str, expected: str) -> None:
    assert extract_code(completion) == expected


def test_crlf_inside_a_fence() -> None:
    assert extract_code(f"{F}python\r\nx = 1\r\n{F}\r\n") == "x = 1"


def test_tabs_are_kept() -> None:
    code = "def f():\n\treturn 1"
    assert extract_code(f"{F}python\n{code}\n{F}") == code
    assert sanitize(code).ok


# --- chat format ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ([{"role": "assistant", "content": "x = 1"}], "x = 1"),
        (
            [
                {"role": "assistant", "content": "old = 1"},
                {"role": "user", "content": "again"},
                {"role": "assistant", "content": "new = 2"},
                {"role": "tool", "content": "out = 3"},
            ],
            "new = 2",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"{F}python\nx = "},
                        {"type": "image", "image": "..."},
                        {"type": "reasoning", "text": "draft()\n"},
                        {"type": "text", "text": f"1\n{F}"},
                    ],
                }
            ],
            f"{F}python\nx = 1\n{F}",
        ),
        ([{"role": "user", "content": "x = 1"}], ""),
        ([{"role": "assistant", "content": None}], ""),
        ([{"role": "assistant", "content": [{"type": "text", "text": 5}]}], ""),
        ([{"role": "assistant", "content": "y = 2"}, "not a message"], "y = 2"),
        ([], ""),
    ],
    ids=[
        "single",
        "last-assistant",
        "content-parts",
        "no-assistant",
        "none-content",
        "bad-part",
        "bad-message",
        "empty-list",
    ],
)
def test_completion_text(completion: Any, expected: str) -> None:
    assert completion_text(completion) == expected


def test_chat_completion_is_extracted_like_text() -> None:
    completion = [{"role": "assistant", "content": f"Sure!\n{F}python\nprint(2)\n{F}"}]
    assert extract_code(completion) == "print(2)"
    assert sanitize(completion, names=["sorted"]) == Sanitized("print(2)")


# --- function-body continuations --------------------------------------------------------

PROMPT = 'def sort(xs: list[int]) -> list[int]:\n    """Sort xs without sorted()."""\n'


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("    return xs\n\nprint(sort([2, 1]))\n", "    return xs"),
        (
            "    out = []\n\n    for x in xs:\n        if x:\n\n            out.append(x)\n"
            "    return out\ndef other():\n    pass\n",
            "    out = []\n\n    for x in xs:\n        if x:\n\n            out.append(x)\n"
            "    return out",
        ),
        (
            "    @cache\n    def go(i):\n        return i\n    return go(0)\n@dec\ndef g(): pass",
            "    @cache\n    def go(i):\n        return i\n    return go(0)",
        ),
        (
            "    # indented comment stays\n    return xs\n# column-0 comment ends it\nx = 1",
            "    # indented comment stays\n    return xs",
        ),
        ("    return xs\n\n\nif __name__ == '__main__':\n    print(1)", "    return xs"),
        ("    return xs\r\n\r\nprint(1)\r\n", "    return xs"),
        ("\treturn xs\nprint(1)", "\treturn xs"),
        ("    return xs\n```\n\nExplanation: ...", "    return xs"),
        ("    return xs<|endoftext|>", "    return xs"),
        ("def other():\n    return 1\n", ""),
        ("", ""),
    ],
    ids=[
        "simple",
        "nested-and-blank-lines",
        "decorators",
        "comments",
        "main-block",
        "crlf",
        "tab-indent",
        "closing-fence",
        "end-token",
        "no-body",
        "empty",
    ],
)
def test_function_body(completion: str, expected: str) -> None:
    assert function_body(completion) == expected


HELPER_PROMPT = "def helper():\n    return 1\n\n\ndef f(xs):\n"
ESCAPES = {
    "a form feed after the indentation": "    return helper()\n    \fhelper = lambda: 2\n",
    "a form feed after a tab": "    return helper()\n\t\fhelper = lambda: 2\n",
    "a carriage return and a form feed": "    return helper()\r    \fhelper = lambda: 2\r",
    "a form feed under a comment": "    return helper()\n    # done\n  \fhelper = lambda: 2\n",
    "a new def after a form feed": "    return helper()\n    \fdef helper():\n        return 2\n",
    "a backslash continuation": "    return helper()\n\\\nhelper = lambda: 2\n",
    "no-break spaces": "    return helper()\n\u00a0\u00a0\u00a0\u00a0helper = lambda: 2\n",
    "ideographic spaces": "    return helper()\n\u3000helper = lambda: 2\n",
    "a decorator after a form feed": (
        "    return helper()\n    \f@print\ndef helper():\n    return 2\n"
    ),
}


@pytest.mark.parametrize("completion", ESCAPES.values(), ids=ESCAPES.keys())
def test_a_body_cannot_reach_module_level(completion: str) -> None:
    """Those with a form feed after blanks ran their last lines at module level under the line
    heuristic, rebinding the prompt's helper before any test."""
    result = sanitize(completion, prompt=HELPER_PROMPT)
    assert (result.code, result.problem) == (HELPER_PROMPT + "    return helper()", None)
    namespace: dict[str, Any] = {}
    exec(result.code, namespace)
    assert namespace["f"]([]) == 1


BODY_ENDS = {
    "one-line": ("def f(xs):", " return helper()\n    \fhelper = None", " return helper()"),
    "one-line-statements": ("def f(xs):", " return 1; y = 1\nhelper = None", " return 1; y = 1"),
    "one-line-comment": (
        "def f(xs):",
        "  # why\n    return xs\nhelper = 1",
        "  # why\n    return xs",
    ),
    "mid-line": ("def f(xs):\n    return ", "xs\n    \fhelper = None", "xs"),
    "async": ("async def f(xs):\n", "    return xs\n    \fhelper = None", "    return xs"),
    "method": (
        "class A:\n    def f(self):\n",
        "        return 1\n    def g(self):\n        pass",
        "        return 1",
    ),
    "after-nested-def": (
        "def f():\n    def g():\n        pass\n",
        "    return g\n\fx = 1",
        "    return g",
    ),
    "decorated-header-over-lines": (
        "@cache\ndef f(a,\n      b):\n",
        "    return a\n    \fprint(b)",
        "    return a",
    ),
    "colons-in-header": (
        "def f(d: dict = {'a': 1}) -> int:\n",
        "    return d['a']\n\fx = 1",
        "    return d['a']",
    ),
    "trailing-comments-dropped": (
        "def f():\n",
        "    return 1\n    # end\n# Tests:\nf()",
        "    return 1",
    ),
}


@pytest.mark.parametrize(("prompt", "completion", "body"), BODY_ENDS.values(), ids=BODY_ENDS.keys())
def test_the_body_ends_where_the_tokenizer_ends_the_function(
    prompt: str, completion: str, body: str
) -> None:
    result = sanitize(completion, prompt=prompt)
    assert (result.code, result.problem) == (prompt + body, None)


@pytest.mark.parametrize(
    "completion",
    [
        "    s = '''\nhelper = None\n'''\n    return s",
        "    x = (1,\nhelper)\n    return x",
        "    # a column-0 comment does not end the body:\n# here\n    return xs",
        "    return [\n\f1]",
    ],
    ids=["string-over-lines", "brackets", "comment-at-column-0", "form-feed-in-brackets"],
)
def test_what_the_tokenizer_keeps_inside_the_body_stays(completion: str) -> None:
    result = sanitize(completion + "\nhelper = None", prompt=HELPER_PROMPT)
    assert (result.code, result.problem) == (HELPER_PROMPT + completion, None)


@pytest.mark.parametrize(
    ("prompt", "completion"),
    [
        (HELPER_PROMPT, "    return xs\n  \f\thelper = None"),  # past the body: unexpected indent
        ("def f(xs):\n        pass\n", "\treturn xs\nhelper = None"),  # a tab against 8 spaces
        (HELPER_PROMPT, "    return xs\n  helper = None"),  # a dedent to no level
        (HELPER_PROMPT, "    return (xs\nhelper = None"),  # never closed
        (HELPER_PROMPT, "    return '''xs\nhelper = None"),
    ],
    ids=["form-feed-then-tab", "tab-against-spaces", "bad-dedent", "open-bracket", "open-string"],
)
def test_a_body_that_cannot_be_kept_inside_is_a_syntax_error(prompt: str, completion: str) -> None:
    problem = sanitize(completion, prompt=prompt).problem
    assert problem is not None and problem.kind is ProblemKind.SYNTAX_ERROR


def test_a_body_is_read_no_further_than_the_size_limit() -> None:
    """The tokenizer stops past ``max_bytes``: a larger body is too large wherever it ends."""
    body = "    x = 1\n" * 100_000
    result = sanitize(body + "print(1)\n", prompt=HELPER_PROMPT, max_bytes=1000)
    assert result.problem is not None and result.problem.kind is ProblemKind.TOO_LARGE
    assert 990 < len(result.code) - len(HELPER_PROMPT) < 1010  # cut near the limit


def test_code_the_compiler_places_after_the_function_is_a_syntax_error() -> None:
    """The compiler's reading, not the tokenizer's, has the last word (they could differ)."""
    code = HELPER_PROMPT + "    return 1\nhelper = None"
    problem = _escape(code, (5, 0), len(HELPER_PROMPT))
    assert problem is not None and (problem.kind, problem.line) == (ProblemKind.SYNTAX_ERROR, 7)
    assert _escape(HELPER_PROMPT + "    return 1", (5, 0), len(HELPER_PROMPT)) is None
    assert _escape(code + "(", (5, 0), len(HELPER_PROMPT)) is None  # the syntax check's


def test_body_assembles_with_prompt_and_runs() -> None:
    completion = "    return [x for x in xs]\n\nassert sort([1]) == [1]\n"
    code = extract_code(completion, prompt=PROMPT)
    assert code == PROMPT + "    return [x for x in xs]"
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert namespace["sort"]([3, 4]) == [3, 4]


def test_body_finishes_a_prompt_without_trailing_newline() -> None:
    prompt = "def f(x):\n    return "
    assert extract_code("x + 1\nprint(f(1))", prompt=prompt) == "def f(x):\n    return x + 1"
    assert extract_code("\n    return x\nprint(1)", prompt="def f(x):") == (
        "def f(x):\n    return x"
    )


def test_body_from_chat_completion_and_crlf_prompt() -> None:
    completion = [{"role": "assistant", "content": "    return xs\r\nprint(1)"}]
    prompt = PROMPT.replace("\n", "\r\n")
    assert extract_code(completion, prompt=prompt) == PROMPT + "    return xs"


def test_empty_body_is_an_empty_problem() -> None:
    result = sanitize("print('no body')\n", prompt=PROMPT)
    assert result.problem is not None
    assert result.problem.kind is ProblemKind.EMPTY
    assert result.code == PROMPT


# --- substring check ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ys = sorted(xs)", ("sorted(",)),
        ("xs.sort()", (".sort(",)),
        ("ys = SORTED(xs); xs.Sort()", ("sorted(", ".sort(")),
        ('print("sorted(")', ("sorted(",)),  # known: strings and comments match too
        ("# sorted(xs)", ("sorted(",)),
        ("sorted_list = xs", ()),
        ("f = sorted\nf(xs)", ()),  # known: evaded by aliasing
        (WIDE_SORTED + "(xs)", ()),  # known: evaded by NFKC-equal identifiers
    ],
)
def test_banned_substrings(code: str, expected: tuple[str, ...]) -> None:
    assert banned_substrings(code, ["sorted(", ".sort("]) == expected


def test_banned_substrings_takes_one_string_and_ignores_empty_patterns() -> None:
    assert banned_substrings("sorted(x)", "sorted(") == ("sorted(",)
    assert banned_substrings("x = 1", ["", "y"]) == ()


# --- AST check ------------------------------------------------------------------------------


def constructs(code: str, **ban: Any) -> set[str | None]:
    ban = ban or {"names": ["sorted"], "attributes": ["sort"]}
    return {p.construct for p in find_banned(code, **ban)}


@pytest.mark.parametrize(
    ("code", "construct"),
    [
        ("ys = sorted(xs)", "sorted"),
        ("f = sorted\nys = f(xs)", "sorted"),
        ("ys = list(map(sorted, [xs]))", "sorted"),
        ("from builtins import sorted as s\nys = s(xs)", "sorted"),
        ("from helpers import sorted as s\nys = s(xs)", "sorted"),
        (f"ys = [*{WIDE_SORTED}(xs)]", "sorted"),
        ("ys = f'{sorted(xs)}'", "sorted"),
        ("ys = (lambda f=sorted: f(xs))()", "sorted"),
        ("xs.sort()", "sort"),
        ("list.sort(xs)", "sort"),
        ("m = xs.sort\nm()", "sort"),
        ("getattr(xs, 'sort')()", "sort"),
        ("getattr(xs, 'sort', None)()", "sort"),
        ("from operator import methodcaller\nmethodcaller('sort')(xs)", "sort"),
        ("import operator as op\nop.attrgetter('real', 'sort')(xs)()", "sort"),
        ("from somewhere import sort", "sort"),
        ("match xs:\n    case list(sort=f):\n        f()", "sort"),
        ("getattr(xs, 'so' + 'rt')()", "getattr"),
        ("getattr(xs, ''.join(['s', 'o', 'r', 't']))()", "getattr"),
        ("name = 'sort'\ngetattr(xs, name)()", "getattr"),
        ("getattr(xs, *['sort'])()", "getattr"),
        ("getattr(*[xs, 'sort'])()", "getattr"),
        ("g = getattr\ng(xs, 'sort')()", "getattr"),
        ("from operator import methodcaller as mc\nmc('so' + 'rt')(xs)", "methodcaller"),
        ("b = __import__('builtins')\nb.sorted(xs)", "__import__"),
        ("import importlib\nimportlib.import_module('builtins').sorted(xs)", "importlib"),
        ("from importlib import import_module\nimport_module('builtins')", "importlib"),
        ("import importlib.util", "importlib"),
        ("eval('sor' + 'ted(xs)')", "eval"),
        ("eval(input())", "eval"),
        ("e = eval\ne('1')", "eval"),
        ("exec(bytes([120]).decode())", "exec"),
        ("exec(compile(src, '<s>', 'exec'))", "compile"),
        ("exec('ys = sorted(xs)')", "sorted"),
        ("eval('xs.sort()')", "sort"),
        ("compile('sorted(xs)', '', 'eval')", "sorted"),
        ("exec('exec(\"sorted(xs)\")')", "sorted"),
        ("exec('ys = (')", "exec"),
        ("import builtins\nbuiltins.sorted(xs)", "builtins"),
        ("from builtins import *", "builtins"),
        ("__builtins__['sorted'](xs)", "__builtins__"),
        ("__builtins__.sorted(xs)", "__builtins__"),
        ("globals()['__builtins__']", "globals"),
        ("g = globals\ng()", "globals"),
        ("locals()", "locals"),
        ("import builtins\nvars(builtins)['sorted'](xs)", "vars"),
        ("import sys\nsys.modules['builtins'].sorted(xs)", "modules"),
        ("import sys as s\ns.modules['builtins']", "modules"),
        ("from sys import modules", "modules"),
        ("import sys\nsys._getframe().f_builtins['sorted']", "f_builtins"),
        ("print.__self__.sorted(xs)", "__self__"),
        ("().__class__.__base__.__subclasses__()", "__subclasses__"),
        ("f.__globals__['__builtins__']", "__globals__"),
        ("type(xs).__dict__['sort'](xs)", "__dict__"),
        ("object.__getattribute__(xs, 'sort')()", "__getattribute__"),
        ("import pickle", "pickle"),
        ("import gc\ngc.get_objects()", "gc"),
        ("import ctypes", "ctypes"),
        ("__loader__.load_module('builtins')", "__loader__"),
        ("import reprlib\nreprlib.builtins.sorted(xs)", "builtins"),
        ("from reprlib import builtins as b\nb.sorted(xs)", "builtins"),
        ("import enum\nmatch enum:\n    case object(bltns=b):\n        b", "bltns"),
        ("from pydoc import locate\nlocate('sor' + 'ted')(xs)", "pydoc"),
        ("import timeit\ntimeit.timeit('sor' + 'ted(xs)', number=1)", "timeit"),
        ("import cProfile\ncProfile.run(src)", "cProfile"),
        ("import logging.config as c\nc.BaseConfigurator({}).resolve(n)", "logging.config"),
        ("from logging import config", "logging.config"),
        ("from unittest import mock\nmock._importer('builtins')", "unittest.mock"),
        ("from typing import get_type_hints", "get_type_hints"),
        ("import typing\ntyping.ForwardRef('sorted')", "ForwardRef"),
        ("import string\nclass F(string.Formatter): pass", "Formatter"),
        ("import subprocess", "subprocess"),
        ("from multiprocessing.reduction import ForkingPickler", "multiprocessing"),
        ("import os\nos.popen(cmd).read()", "popen"),
        ("import os\nos.system(cmd)", "system"),
        ("import os\nos.execvpe(a, b, c)", "execvpe"),
        ("import sys\nargv = [sys.executable, '-c', src]", "executable"),
    ],
)
def test_ast_check_flags(code: str, construct: str) -> None:
    assert construct in constructs(code)


@pytest.mark.parametrize(
    "code",
    [
        "sorted_list = []\nis_sorted = True\nxs_sorted = sorted_list",
        'print("sorted(")\n# sorted(xs)\n"""xs.sort()"""',
        "def sort_items(xs):\n    return xs\nsort_items([1])",
        "class Node:\n    def __init__(self):\n        self.sorted_ = 1",
        "xs.sorted_copy = 1\nsort_key = len",
        "getattr(xs, 'append')(1)",
        "from operator import itemgetter, methodcaller\nmethodcaller('append', 1)",
        "exec('print(1)')\neval('1 + 2')",
        "import sys\ndata = sys.stdin.read()\nsys.setrecursionlimit(10**6)",
        "import heapq, math, collections\nfrom functools import lru_cache",
        "model.eval()\nre.compile('x')\nnp.argsort(xs)",
        "if __name__ == '__main__':\n    print(xs.__class__.__name__)",
        "def f(sorted=None):\n    return f(sorted=1)",
        "match xs:\n    case list(append=f):\n        f(1)",
    ],
    ids=[
        "similar-names",
        "strings-and-comments",
        "def-sort-prefix",
        "attribute-prefix",
        "attr-store-prefix",
        "literal-getattr",
        "literal-methodcaller",
        "literal-exec-eval",
        "sys-stdin",
        "ordinary-imports",
        "method-named-eval-compile",
        "main-guard-and-class-name",
        "keyword-named-sorted",
        "match-other-attribute",
    ],
)
def test_ast_check_has_no_false_positives(code: str) -> None:
    assert find_banned(code, names=["sorted"], attributes=["sort"]) == ()


def test_names_and_attributes_are_separate() -> None:
    assert find_banned("xs.sort()", names=["sorted"]) == ()
    assert find_banned("ys = sorted(xs)", attributes=["sort"]) == ()
    assert constructs("xs.sorted()", attributes=["sorted"]) == {"sorted"}


def test_nothing_banned_flags_nothing() -> None:
    assert find_banned("import builtins\neval(input())\ngetattr(x, y)") == ()


@pytest.mark.parametrize(
    ("code", "construct"),
    [
        ("import subprocess", "subprocess"),
        ("import os.path", "os"),
        ("from os import path", "os"),
        ("from os.path import join", "os"),
        ("import subprocess as sp", "subprocess"),
        ("exec('import os')", "os"),
    ],
)
def test_banned_modules(code: str, construct: str) -> None:
    assert constructs(code, modules=["os", "subprocess"]) == {construct}


@pytest.mark.parametrize(
    "code",
    [
        "from\tbisect\timport\tinsort",
        "import\tbisect",
        "from bisect import\\\n    insort",
        "from . import x",
        "from .. mod import y",
        "def f():\n    import os.path as p",
    ],
    ids=["tabs", "tab-after-import", "backslash", "relative", "relative-module", "nested"],
)
def test_a_banned_import_keyword_bans_every_import_however_spelled(code: str) -> None:
    """As a substring, ``"import "`` missed the first three: it was all that stood there."""
    problem = sanitize(code, substrings=["import "], modules=["*"]).problem
    assert problem is not None and problem.kind is ProblemKind.BANNED
    assert find_banned(code, modules=["*"])[0].construct == "*"


def test_banned_submodule_is_matched_through_from_import() -> None:
    assert constructs("from os import path", modules=["os.path"]) == {"os.path"}
    assert find_banned("import os\nimport osmosis", modules=["os.path"]) == ()
    assert find_banned("import osmosis\nfrom ossify import path", modules=["os"]) == ()


@pytest.mark.parametrize(
    ("patterns", "bans"),
    [
        (["sorted(", ".sort("], (("sorted",), ("sorted", "sort"), ())),
        (["\uff53\uff55\uff4d (", "heapq.nsmallest("], (("sum",), ("sum", "nsmallest"), ())),
        (
            ["import heapq", "from bisect import insort", "import os.path as p"],
            ((), (), ("heapq", "bisect", "os.path")),
        ),
        (["heapq", "max"], (("heapq", "max"), ("heapq", "max"), ("heapq",))),
        (["[::-1]", "for", "x ** 2", ""], ((), (), ())),
        (["import ", " from "], ((), (), ("*",))),
    ],
    ids=[
        "daytona-sort",
        "fullwidth-and-qualified",
        "imports",
        "bare-words",
        "nothing-named",
        "the-import-keyword",
    ],
)
def test_pattern_bans_name_what_the_patterns_mean(
    patterns: list[str], bans: tuple[tuple[str, ...], ...]
) -> None:
    assert pattern_bans(patterns) == bans


def test_ast_problem_names_line_and_construct() -> None:
    code = "xs = [3, 1]\n\nys = sorted(xs)\n"
    assert find_banned(code, names="sorted") == (
        Problem(ProblemKind.BANNED, "line 3: uses banned name 'sorted'", 3, "sorted"),
    )


def test_ast_problems_are_ordered_by_line_and_deduplicated() -> None:
    code = "a = sorted(x) or sorted(y)\nb = x.sort\nc = sorted"
    problems = find_banned(code, names=["sorted"], attributes=["sort"])
    assert [(p.line, p.construct) for p in problems] == [(1, "sorted"), (2, "sort"), (3, "sorted")]
    assert all(p.kind is ProblemKind.BANNED for p in problems)


def test_alias_reports_the_banned_name() -> None:
    (import_problem, use_problem) = [
        p
        for p in find_banned("from m import sorted as s\ns(x)", names=["sorted"])
        if p.construct == "sorted"
    ]
    assert import_problem.line == 1 and use_problem.line == 2
    assert "'s'" in use_problem.reason


# --- malformed code as outcomes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("def f(:\n    pass", 1),
        ("x = 1\nif x\n    y = 2", 2),
        ("def f():\nreturn 1", 2),
        ("if True:\n        x = 1\n\ty = 2", 3),
    ],
    ids=["bad-signature", "missing-colon", "indentation", "tab-error"],
)
def test_syntax_error_is_a_problem(code: str, line: int) -> None:
    (problem,) = find_banned(code, names=["sorted"])
    assert problem.kind is ProblemKind.SYNTAX_ERROR
    assert problem.line == line
    assert problem.reason.startswith(f"line {line}: ")
    assert sanitize(code).problem == problem


@pytest.mark.parametrize(
    "code",
    [
        "x = '\ud800'",
        "x = " + "-" * 100_000 + "1",
        "x = y" + ".a" * 100_000,
        "x = " + "(" * 1000 + ")" * 1000,
    ],
    ids=["lone-surrogate", "deep-unary", "deep-attribute", "deep-parens"],
)
def test_unparsable_input_never_raises(code: str) -> None:
    result = sanitize(code, names=["sorted"], max_bytes=10**6)
    assert result.problem is not None
    assert result.problem.kind is ProblemKind.SYNTAX_ERROR


@pytest.mark.parametrize(
    "completion",
    ["x = 1\0\n", f"{F}python\nx = 1\n\0y = 2\n{F}", [{"role": "assistant", "content": "\0"}]],
    ids=["plain", "fenced", "chat"],
)
def test_nul_bytes(completion: Any) -> None:
    problem = sanitize(completion).problem
    assert problem is not None
    assert problem.kind is ProblemKind.NUL_BYTES
    assert find_banned(extract_code(completion), names=["x"]) == (problem,)


def test_nul_byte_line() -> None:
    assert sanitize("a = 1\nb = 2\0").problem == Problem(
        ProblemKind.NUL_BYTES, "line 2: the code contains NUL bytes", 2
    )


@pytest.mark.parametrize(
    "completion",
    ["", "   \n\n", f"{F}python\n{F}", f"{F}python\n\n  \n{F}", [], "<|im_end|>"],
    ids=["empty", "whitespace", "empty-block", "blank-block", "no-messages", "end-token"],
)
def test_empty(completion: Any) -> None:
    problem = sanitize(completion).problem
    assert problem is not None
    assert problem.kind is ProblemKind.EMPTY


def test_too_large_counts_utf8_bytes() -> None:
    code = "s = '" + "é" * 30 + "'"  # 36 characters, 66 bytes
    problem = sanitize(code, max_bytes=40).problem
    assert problem == Problem(ProblemKind.TOO_LARGE, "the code is 66 bytes, over the limit of 40")
    assert sanitize(code, max_bytes=66).ok


def test_default_size_limit() -> None:
    assert DEFAULT_MAX_BYTES == 64 * 1024
    assert sanitize("x = 1\n" * 11_000).problem is not None  # 66,000 bytes
    assert sanitize("x = 1\n" * 10_000).ok


@pytest.mark.slow
def test_adversarial_input_is_fast() -> None:
    """Catches quadratic or backtracking blow-ups (minutes), not speed: the bound is loose so a
    loaded 2-core machine passes (about 1 s when idle)."""
    started = time.perf_counter()
    sanitize(" " * 500_000 + "x", names=["sorted"])
    sanitize("`" * 1_000_000, names=["sorted"])
    sanitize("<|" * 500_000 + "|>", names=["sorted"])
    sanitize("x = a" + ".modules" * 8_000, names=["sorted"], max_bytes=10**6)
    sanitize("exec('" + "x;" * 30_000 + "')", names=["sorted"])
    assert time.perf_counter() - started < 60


# --- sanitize -------------------------------------------------------------------------------


def test_sanitize_clean_completion() -> None:
    completion = f"Sure:\n{F}python\ndef f(xs):\n    return xs[::-1]\n{F}"
    result = sanitize(completion, names=["sorted"], attributes=["sort"], substrings=["sorted("])
    assert result == Sanitized("def f(xs):\n    return xs[::-1]")
    assert result.ok


def test_sanitize_reports_substring_with_line() -> None:
    result = sanitize("a = 1\n# we avoid SORTED(\n", substrings=["sorted(", ".sort("])
    assert result.problem == Problem(
        ProblemKind.BANNED, "line 2: contains banned text 'sorted('", 2, "sorted("
    )


def test_sanitize_reports_first_ast_finding() -> None:
    result = sanitize("xs.sort()\nys = sorted(xs)", names=["sorted"], attributes=["sort"])
    assert result.problem is not None
    assert (result.problem.kind, result.problem.line, result.problem.construct) == (
        ProblemKind.BANNED,
        1,
        "sort",
    )
    assert result.problem.reason == "line 1: uses banned attribute 'sort'"


@pytest.mark.parametrize(
    ("completion", "kind"),
    [
        ("", ProblemKind.EMPTY),
        ("x = (\0", ProblemKind.NUL_BYTES),
        ("x = (\nsorted(", ProblemKind.SYNTAX_ERROR),
        ("y = sorted(x)", ProblemKind.BANNED),
    ],
)
def test_sanitize_check_order(completion: str, kind: ProblemKind) -> None:
    problem = sanitize(completion, names=["sorted"], substrings=["sorted("]).problem
    assert problem is not None and problem.kind is kind


def test_sanitize_size_is_checked_before_parsing() -> None:
    problem = sanitize("x = (\0" * 100, max_bytes=50).problem
    assert problem is not None and problem.kind is ProblemKind.TOO_LARGE


def test_body_mode_holds_only_the_model_to_the_bans() -> None:
    prompt = 'import sys\nmods = sys.modules\ndef f(xs):\n    """>>> f(xs) == sorted(xs)"""\n'
    clean = sanitize(
        "    return xs[::-1]\n", prompt=prompt, names=["sorted"], substrings=["sorted("]
    )
    assert clean.ok
    assert clean.code == prompt + "    return xs[::-1]"
    dirty = sanitize("    return sorted(xs)\n", prompt=prompt, names=["sorted"])
    assert dirty.problem is not None and dirty.problem.line == 5
    text = sanitize("    # sorted( is off\n    return xs", prompt=prompt, substrings=["sorted("])
    assert text.problem is not None and text.problem.line == 5


def test_body_mode_syntax_error_in_assembled_program() -> None:
    problem = sanitize("    return (xs\n", prompt=PROMPT).problem
    assert problem is not None and problem.kind is ProblemKind.SYNTAX_ERROR


def test_problem_kinds_are_strings() -> None:
    assert {k.value for k in ProblemKind} == {
        "empty",
        "too_large",
        "nul_bytes",
        "syntax_error",
        "banned",
    }
    assert ProblemKind("banned") is ProblemKind.BANNED


def test_a_program_in_another_language_comes_from_a_block_tagged_with_its_names() -> None:
    """A C++ problem takes the ```cpp (or ```c++) block, never a Python one; its syntax is
    its compiler's to judge, so Python's checks do not run on it."""
    cpp = language_for("cpp17")
    assert cpp is not None
    reply = (
        "Idea first:\n```python\nprint(1)\n```\nIn C++:\n```c++\nint main() { return 0; }\n```\n"
    )
    assert extract_code(reply, language=cpp) == "int main() { return 0; }"
    assert extract_code(reply) == "print(1)"
    assert extract_code("```python\nprint(1)\n```", language=cpp) == ""
    cleaned = sanitize("```cpp\nint main() { return 0 }\n```", language=cpp)
    assert cleaned.problem is None and cleaned.code == "int main() { return 0 }"
    nul = sanitize("```cpp\nint main() {}\0\n```", language=cpp)
    assert nul.problem is not None and nul.problem.kind is ProblemKind.NUL_BYTES
    assert block_tags(reply) == ["python", "c++"]
