"""Misspelt keywords fail where they are passed, as they do in Python itself.

Options flow down through ``**options`` (reward function -> pool -> sandbox -> provider); a
keyword that no layer reads would otherwise pass silently (``pool_sise=2`` leaves the pool at its
default size). Each layer checks what it passes on against what the layers below accept.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

C = TypeVar("C", bound=Callable[..., Any])


def check_keywords(owner: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """Raise ``TypeError`` naming the keywords of ``given`` that ``valid`` lacks, and the valid
    ones (``owner`` is what the caller called, e.g. ``"exec_reward()"``)."""
    accepted = set(valid)
    unknown = sorted(set(given) - accepted)
    if not unknown:
        return
    guesses = [match for name in unknown for match in difflib.get_close_matches(name, accepted, 1)]
    hint = f" (did you mean {', '.join(map(repr, guesses))}?)" if guesses else ""
    noun = "an unexpected keyword argument" if len(unknown) == 1 else "unexpected keyword arguments"
    raise TypeError(
        f"{owner} got {noun} {', '.join(map(repr, unknown))}{hint}; "
        f"valid keywords: {', '.join(sorted(accepted))}"
    )


def keyword_only(fn: Callable[..., Any]) -> frozenset[str]:
    """The names of ``fn``'s keyword-only parameters (the options of a constructor)."""
    parameters = inspect.signature(fn).parameters.values()
    return frozenset(p.name for p in parameters if p.kind is p.KEYWORD_ONLY)


def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Every name ``fn`` can take as a keyword; None if it takes any (``**kwargs``) or does
    not say (some builtins), which leaves checking them to ``fn``."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except ValueError:
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(
        p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    )


def _checked(method: Callable[..., Any], valid: frozenset[str]) -> Callable[..., Any]:
    """``method``, refusing keywords outside ``valid`` with :func:`check_keywords`' hint."""
    owner = f"{method.__qualname__}()"
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.keys() <= valid:
                check_keywords(owner, kwargs, valid)
            return await method(*args, **kwargs)

        return checked_async

    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.keys() <= valid:
            check_keywords(owner, kwargs, valid)
        return method(*args, **kwargs)

    return checked


def suggest_keywords(target: C) -> C:
    """Give a public function, or every public method of a class, with a fixed set of keywords
    a did-you-mean for a misspelt one (``exec(..., timeot=3)``), as the ``**options`` paths
    have: Python's own ``TypeError`` names neither the keyword meant nor the method the caller
    called."""
    if not isinstance(target, type):
        valid = accepted_keywords(target)
        return target if valid is None else cast(C, _checked(target, valid))
    for name, attr in list(vars(target).items()):
        if name.startswith("_") or not inspect.isfunction(attr):
            continue
        valid = accepted_keywords(attr)
        if valid is not None:
            setattr(target, name, _checked(attr, valid - {"self"}))
    return target
