"""The layers of docs/architecture.md hold: imports go down only, no cycles, a torch-free core."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("core", "runtime", "models", "export", "train", "benchmarks", "cli")


def allowed() -> dict[str, set[str]]:
    """The "may import" column of the doc's layer table, per folder."""
    out = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`(\w+)/`", cells[0]):
            folder = cells[0].strip("`/")
            out[folder] = {w for w in re.findall(r"\w+", cells[2]) if w in FOLDERS}
    assert set(out) == set(FOLDERS), out
    return out


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "edgeformer." + ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[str, bool]]:
    """(module imported, at module level) for every import in the file, relative ones resolved."""
    mod, tree = module_name(path, root), ast.parse(path.read_text())
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level and not node.module:  # `from . import a, b`: the modules a, b
                base = package[: len(package) - node.level + 1]
                found += [(".".join([*base, a.name]), id(node) in top_level) for a in node.names]
                continue
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module])
            else:
                target = node.module or ""
            found.append((target, id(node) in top_level))
        elif isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
    return found


def sources(root: Path = ROOT) -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((root / folder).rglob("*.py"))]


def upward_imports(root: Path = ROOT) -> list[str]:
    rules = allowed()
    wrong = []
    for path in sources(root):
        folder = path.relative_to(root).parts[0]
        for target, _ in imports(path, root):
            if target.startswith("edgeformer."):
                other = target.split(".")[1]
                if other != folder and other not in rules[folder]:
                    wrong.append(f"{path.relative_to(root)} imports {target}")
    return wrong


def test_imports_go_down_the_layers_only():
    wrong = upward_imports()
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "bad.py").write_text("def f():\n    from ..models import build_model\n")
    assert upward_imports(tmp_path) == ["core/bad.py imports edgeformer.models"]


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sources():
        for target, _ in imports(path):
            if target.startswith("edgeformer."):
                graph[module_name(path)].add(target)
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_the_core_imports_numpy_only_and_the_runtime_never_torch():
    heavy = {"torch", "onnxruntime", "onnx", "tokenizers", "sacrebleu", "safetensors", "tqdm"}
    for path in sorted((ROOT / "core").rglob("*.py")):
        at_load = {t.split(".")[0] for t, top in imports(path) if top}
        assert not at_load & heavy, (path.name, at_load & heavy)
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        assert "torch" not in {t.split(".")[0] for t, _ in imports(path)}, path.name


def test_commands_are_imported_not_named():
    """The command line imports its commands (so the checks above see those edges); no source
    imports an edgeformer module from a name string (importlib, __import__, runpy)."""
    named = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            first, func = node.args[0], ast.unparse(node.func)
            if func.endswith(("import_module", "__import__", "run_module", "run_path")) and (
                isinstance(first, ast.Constant) and str(first.value).startswith("edgeformer")
            ):
                named.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not named, named
    cli = {t.split(".")[1] for t, _ in imports(ROOT / "cli" / "__init__.py") if "edgeformer." in t}
    assert {"train", "export", "runtime", "benchmarks"} <= cli, cli
