"""Each door is a package with one front: outside `bridge/<door>/`, the code uses a door
only through what its `__init__` exports, never by reaching into its modules."""
import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOORS = ("mqks", "malamute", "twino", "textqueue")


def _reaching_in(path, door):
    """Imports in `path` of door `door` that pass by its package's exports."""
    exported = set(importlib.import_module(f"mqksbridge.bridge.{door}").__all__)
    package = f"mqksbridge.bridge.{door}"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            if node.module == package:
                modules = [f"{package}.{a.name}" for a in node.names if a.name not in exported]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in modules
                  if m.startswith(package + ".")]
    return found


def test_outside_a_door_its_package_exports_are_all_there_is():
    sources = [p for top in ("bridge", "twisted") for p in sorted((ROOT / top).rglob("*.py"))]
    found = [hit for door in DOORS for path in sources
             if not path.is_relative_to(ROOT / "bridge" / door)
             for hit in _reaching_in(path, door)]
    assert found == []
