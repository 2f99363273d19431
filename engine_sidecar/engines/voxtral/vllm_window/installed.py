"""The symbol table (symbols.py) checked against the vLLM installed here, at start-up."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable

from engine_sidecar.engines.voxtral.vllm_window.symbols import Symbol


def missing(symbols: Iterable[Symbol]) -> list[str]:
    """A line for each symbol the installed vLLM lacks or whose parameters differ."""
    out = []
    for symbol in symbols:
        try:
            owner = getattr(importlib.import_module(symbol.module), symbol.name)
        except (ImportError, AttributeError):
            out.append(f"{symbol.module}.{symbol.name}")
            continue
        if symbol.attr and not _has_attribute(owner, symbol.attr):
            out.append(str(symbol))
            continue
        target = getattr(owner, symbol.attr, None) if symbol.attr else owner
        if symbol.params is not None and callable(target) and not _params_match(target, symbol.params):
            out.append(f"{symbol} (vLLM's: {_signature(target)})")
    return out


def _has_attribute(cls: type, attr: str) -> bool:
    """A method, class attribute or annotated field, or an instance attribute its vLLM source sets."""
    if hasattr(cls, attr) or any(attr in getattr(base, "__annotations__", {}) for base in getattr(cls, "__mro__", ())):
        return True
    source = "".join(_source(base) for base in getattr(cls, "__mro__", ()) if base.__module__.startswith("vllm"))
    return any(f"self.{attr}{end}" in source for end in (" ", ":", "="))


def _params_match(function: object, wanted: tuple[str, ...]) -> bool:
    names = [p for p in _signature(function).parameters if p != "self"]
    return names[: len(wanted)] == list(wanted)


def _signature(function: object) -> inspect.Signature:
    try:
        return inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return inspect.Signature()


def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""
