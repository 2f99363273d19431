"""The project's import graph: no cycle anywhere, and no import up a layer.

Read from the sources (every import statement, those inside functions and under TYPE_CHECKING included), so a
lazy import cannot hide a cycle. The layers, top to bottom:

- the `voxgate` command (service/entry.py, service/cli.py), which delegates to both processes;
- the service (service/) and the sidecar's process layer (engine_sidecar/process/: serving the engine API,
  hosting an engine core and its front ends);
- the sidecar's engine registry (engine_sidecar/engines/__init__.py);
- the engines (fake, sphinx, voxtral/), which never import each other;
- what every engine builds on (engine_sidecar/engines/engine.py, base.py, output_queue.py, limits.py);
- the contract (engine_api/) and the public client (voxgate_client), which import neither process.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

# Where each top-level package's sources lie (the clients are installed from their own directories).
SOURCE_ROOTS = {
    "service": ROOT,
    "engine_sidecar": ROOT,
    "engine_api": ROOT,
    "voxgate_client": ROOT / "clients" / "python",
    "livekit": ROOT / "clients" / "livekit-plugins-voxgate",
    "pipecat_voxgate": ROOT / "clients" / "pipecat-voxgate",
}
ENGINE_BASE = {f"engine_sidecar.engines.{name}" for name in ("engine", "base", "output_queue", "limits")}
ENGINES = ("fake", "sphinx", "voxtral")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for top, root in SOURCE_ROOTS.items():
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = Module(name, path, is_package)
    return found


def imported_names(module: Module) -> Iterator[str]:
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    for node in ast.walk(ast.parse(module.path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for module in mods.values():
        targets = set()
        for name in imported_names(module):
            while name and name not in mods:  # `from pkg import name`: the module pkg.name, else pkg
                name = name.rpartition(".")[0]
            if name and name != module.name:
                targets.add(name)
        graph[module.name] = targets
    # `from pkg import sub` yields both pkg and pkg.sub: keep the package only where a name of its own is used
    for name, targets in graph.items():
        for target in list(targets):
            if (
                mods[target].is_package
                and any(t.startswith(target + ".") for t in targets)
                and not _uses_package(mods[name], target)
            ):
                targets.discard(target)
    return graph


def _uses_package(module: Module, package: str) -> bool:
    """Whether `module` imports a name defined in `package`'s __init__ (not only its submodules)."""
    mods = modules()
    own = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    for node in ast.walk(ast.parse(module.path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = own[: len(own) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            if source == package and any(f"{source}.{a.name}" not in mods for a in node.names):
                return True
        elif isinstance(node, ast.Import) and any(a.name == package for a in node.names):
            return True
    return False


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer(name: str) -> int:
    """Higher may import lower or equal, never the reverse."""
    if name in ("service.cli", "service.entry", "service.__main__"):
        return 5
    if name.startswith(("service", "engine_sidecar.process", "engine_sidecar.__main__")):
        return 4
    if name == "engine_sidecar.engines":
        return 3
    if name in ENGINE_BASE:
        return 1
    if name.startswith("engine_sidecar.engines."):
        return 2
    if name.startswith(("engine_api", "voxgate_client")):
        return 0
    return 4  # the client plugins sit on voxgate_client


def engine_of(name: str) -> str | None:
    for engine in ENGINES:
        if name == f"engine_sidecar.engines.{engine}" or name.startswith(f"engine_sidecar.engines.{engine}."):
            return engine
    return None


def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "engine_sidecar.engines.voxtral.engine" in graph["engine_sidecar.engines"]  # inside create_engine
    assert "engine_sidecar.process.core_host" in graph["engine_sidecar.process.main"]  # inside run_sidecar


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_up_a_layer() -> None:
    upward = [
        f"{src} -> {dst}" for src, targets in import_graph().items() for dst in targets if layer(dst) > layer(src)
    ]
    assert upward == []


def test_the_service_and_the_sidecar_import_nothing_of_each_other() -> None:
    crossing = [
        f"{src} -> {dst}"
        for src, targets in import_graph().items()
        for dst in targets
        if src != "service.cli"
        and (
            src.startswith("service")
            and dst.startswith("engine_sidecar")
            or src.startswith("engine_sidecar")
            and dst.startswith("service")
        )
    ]
    assert crossing == []


def test_engines_import_no_other_engine() -> None:
    crossing = [
        f"{src} -> {dst}"
        for src, targets in import_graph().items()
        for dst in targets
        if (a := engine_of(src)) and (b := engine_of(dst)) and a != b
    ]
    assert crossing == []
