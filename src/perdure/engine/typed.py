"""Typed payloads: Pydantic models and dataclasses, stored as plain JSON.

Workflow inputs, step outputs, results and signal payloads may be Pydantic
(v2) models or dataclasses, alone or nested (``list[Model]``,
``Model | None``, ``dict[str, Model]``). They are stored as the JSON they
dump to, so SQL and the dashboard read them like any payload, and rebuilt
from that JSON with the type the code declares:

* a workflow's input with its function's input parameter annotation, when
  ``app.start`` is called (an invalid input is refused there, with
  [`InvalidPayload`][perdure.errors.InvalidPayload], before anything is written) and
  each time the run is executed;
* a step's output with the step function's return annotation, before its
  checkpoint is written (an output that does not fit fails the step) and on
  every replay;
* a run's result with the workflow function's return annotation, in
  ``run.result()``; a signal's payload with ``wait_for_signal(..., type=T)``.

An annotation that names no model and no dataclass (``dict``, ``int``, none
at all) changes nothing: the value is the decoded JSON, as before. With
Pydantic installed its ``TypeAdapter`` validates and dumps (so dataclass
fields may be datetimes, UUIDs, enums...); without it, dataclasses still work
when their fields are JSON values, other dataclasses, lists, dicts or
optionals of those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import sys
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any

from perdure.errors import InvalidPayload

#: Returned by ``plain`` for a value that is neither a model nor a dataclass.
NOT_TYPED: Any = object()


@functools.cache
def _pydantic() -> Any:
    """The pydantic module if it is installed (imported once, on first need), else None."""
    try:
        return importlib.import_module("pydantic")
    except ImportError:
        return None


def _is_model_class(tp: object) -> bool:
    module = sys.modules.get("pydantic")
    return module is not None and isinstance(tp, type) and issubclass(tp, module.BaseModel)


def plain(value: Any) -> Any:
    """A model or dataclass instance as the plain JSON values it stores as; else NOT_TYPED."""
    if _is_model_class(type(value)):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        pydantic = _pydantic()
        if pydantic is not None:
            return _adapter(type(value)).dump_python(value, mode="json")
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return NOT_TYPED


def _involves_types(tp: object) -> bool:
    """Whether annotation ``tp`` names a model or a dataclass, itself or inside."""
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_model_class(tp)):
        return True
    return any(_involves_types(arg) for arg in typing.get_args(tp))


@dataclasses.dataclass(frozen=True)
class Hint:
    """A resolved annotation and how to rebuild values of it from JSON."""

    annotation: Any = Any

    @functools.cached_property
    def typed(self) -> bool:
        """True when the annotation names a model or dataclass (else rebuilding is a no-op)."""
        return _involves_types(self.annotation)

    def rebuild(self, value: Any, what: str) -> Any:
        """``value`` (decoded JSON, or already an instance) as the annotated type.

        InvalidPayload, naming ``what``, when it does not fit. Untyped
        annotations give ``value`` back unchanged.
        """
        if not self.typed:
            return value
        pydantic = _pydantic()
        if pydantic is None:
            return _build(self.annotation, value, what, "")
        adapter = _adapter(self.annotation)
        try:
            return adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            raise InvalidPayload(what, [_pydantic_error(e) for e in exc.errors()]) from None


UNTYPED = Hint()


def _pydantic_error(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ())) or "value"
    return f"{where}: {error.get('msg', 'invalid')}"


def _adapter(annotation: Any) -> Any:
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an unhashable annotation: build it each time
        return _make_adapter(annotation)


@functools.lru_cache(maxsize=1024)
def _cached_adapter(annotation: Any) -> Any:
    return _make_adapter(annotation)


def _make_adapter(annotation: Any) -> Any:
    pydantic = _pydantic()
    try:
        return pydantic.TypeAdapter(annotation)
    except pydantic.PydanticUserError as exc:
        raise InvalidPayload(
            f"a value of type {annotation!r}", [f"pydantic cannot validate this type: {exc}"]
        ) from None


def of(annotation: Any) -> Hint:
    """The hint of an explicit type (``wait_for_signal(..., type=T)``)."""
    return UNTYPED if annotation is None else Hint(annotation)


def param_hint(fn: Callable[..., Any], index: int) -> Hint:
    """The hint of ``fn``'s positional parameter number ``index`` (UNTYPED if none)."""
    return _hints(fn)[0].get(index, UNTYPED)


def return_hint(fn: Callable[..., Any]) -> Hint:
    """The hint of ``fn``'s return annotation (UNTYPED if none or unresolvable)."""
    return _hints(fn)[1]


# Weak keys: a step written as a lambda is a new function at every call, and a
# strong cache would keep each one alive, with whatever it captured.
_HINTS: weakref.WeakKeyDictionary[Any, tuple[dict[int, Hint], Hint]] = weakref.WeakKeyDictionary()


def _hints(fn: Callable[..., Any]) -> tuple[dict[int, Hint], Hint]:
    try:
        return _HINTS[fn]
    except (KeyError, TypeError):  # not seen yet, or not weakly referenceable
        pass
    found = _read_hints(fn)
    with contextlib.suppress(TypeError):
        _HINTS[fn] = found
    return found


def _read_hints(fn: Callable[..., Any]) -> tuple[dict[int, Hint], Hint]:
    """Positional parameter hints by index, and the return hint, of ``fn``."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.isfunction(target) and not target.__annotations__:
        return {}, UNTYPED  # a lambda, say: nothing to read
    if not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = type(target).__call__.__get__(target)  # a callable object: its __call__
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return {}, UNTYPED
    resolved = _resolved_annotations(target)
    params: dict[int, Hint] = {}
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    for index, param in enumerate(positional):
        if param.name in resolved:
            params[index] = Hint(resolved[param.name])
    returns = Hint(resolved["return"]) if "return" in resolved else UNTYPED
    return params, returns


def _resolved_annotations(fn: Any) -> dict[str, Any]:
    """``fn``'s annotations with strings evaluated; one that does not resolve is left out."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # a name that does not resolve: take the others one by one
        pass
    raw = getattr(fn, "__annotations__", None) or {}
    namespace = getattr(fn, "__globals__", {})
    found: dict[str, Any] = {}
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # an annotation is the user's own code
            except Exception:
                continue
        found[name] = annotation
    return found


# Rebuilding without pydantic ---------------------------------------------------------


def _build(tp: Any, value: Any, what: str, path: str) -> Any:
    """``value`` as type ``tp``: dataclasses, containers, optionals and JSON scalars."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if tp is None or tp is type(None):
        return _expect(value is None, value, "null", what, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _build(option, value, what, path)
            except InvalidPayload as exc:
                errors.extend(exc.errors)
        raise InvalidPayload(what, errors or [f"{path or 'value'}: matches no type of {tp}"])
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, what, path)
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        _expect(isinstance(value, list | tuple), value, "a list", what, path)
        kinds = [args[0] if args else Any] * len(value)
        if (origin is tuple) and args and args[-1] is not Ellipsis:
            _expect(len(args) == len(value), value, f"{len(args)} items", what, path)
            kinds = list(args)
        pairs = enumerate(zip(kinds, value, strict=True))
        built = [_build(k, v, what, f"{path}[{i}]") for i, (k, v) in pairs]
        return (origin or tp)(built)
    if origin is dict or tp is dict:
        _expect(isinstance(value, dict), value, "an object", what, path)
        inner = args[1] if len(args) == 2 else Any
        return {
            k: _build(inner, v, what, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(_expect(ok, value, "a number", what, path))
    if tp in (int, str, bool):
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
        return _expect(ok, value, tp.__name__, what, path)
    if origin is typing.Literal:
        return _expect(value in args, value, f"one of {args}", what, path)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise InvalidPayload(
        what,
        [f"{path or 'value'}: {tp!r} cannot be rebuilt without pydantic (pip install pydantic)"],
    )


def _build_dataclass(tp: type, value: Any, what: str, path: str) -> Any:
    if isinstance(value, tp):
        return value
    _expect(isinstance(value, dict), value, f"an object for {tp.__name__}", what, path)
    hints = _resolved_annotations(tp)
    fields = {f.name: f for f in dataclasses.fields(tp)}
    errors = [
        f"{path + '.' if path else ''}{name}: unknown field" for name in value if name not in fields
    ]
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name in value and field.init:
            try:
                kwargs[name] = _build(hints.get(name, Any), value[name], what, where)
            except InvalidPayload as exc:
                errors.extend(exc.errors)
        elif (
            field.init
            and field.default is dataclasses.MISSING
            and (field.default_factory is dataclasses.MISSING)
        ):
            errors.append(f"{where}: field required")
    if errors:
        raise InvalidPayload(what, errors)
    return tp(**kwargs)


def _expect(ok: bool, value: Any, expected: str, what: str, path: str) -> Any:
    if not ok:
        raise InvalidPayload(what, [f"{path or 'value'}: expected {expected}, got {value!r}"[:300]])
    return value
