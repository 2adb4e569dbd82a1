"""How a derived form presents itself: the operation's name, docstring and signature.

The sync and async forms of an operation are made from one coroutine at
import time (``perdure.api.forms``, ``SyncContext``). These helpers make
each form read, to ``help()``, IDEs, debuggers and the API reference, as the
method users call: its parameters with ``self`` first, its own class and name.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

C = TypeVar("C", bound=Callable[..., Any])
K = TypeVar("K", bound=type)


def presents(fn: Callable[..., Any]) -> Callable[[C], C]:
    """Like functools.wraps, but the form's signature is the operation's with ``self`` first.

    So ``help(app.start)``, IDEs and the API reference show the parameters a
    caller passes, and a sync form does not read as a coroutine function.
    """

    def present(call: C) -> C:
        functools.update_wrapper(call, fn)
        del call.__wrapped__  # type: ignore[attr-defined]
        call.__perdure_form__ = True  # type: ignore[attr-defined]
        #: The operation this form is derived from (the surface test checks it).
        call.__perdure_derived_from__ = fn  # type: ignore[attr-defined]
        sig = inspect.signature(fn)
        first, *rest = sig.parameters.values()
        receiver = first.replace(name="self", annotation=inspect.Parameter.empty)
        call.__signature__ = sig.replace(parameters=[receiver, *rest])  # type: ignore[attr-defined]
        return call

    return present


def owned(cls: K) -> K:
    """Name the derived forms in ``cls`` as its own methods (``App.start``, not ``starting.start``).

    Tools that read a method's ``__module__`` and ``__qualname__`` (the API
    reference, debuggers, pickling) then find it where users call it.
    """
    for name, value in vars(cls).items():
        if getattr(value, "__perdure_form__", False):
            value.__module__ = cls.__module__
            value.__qualname__ = f"{cls.__qualname__}.{name}"
    return cls
