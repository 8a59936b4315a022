"""Doors reach the broker through the engine seam only: no module of a door's package
(nor a door's converter) imports the core, at the top or inside a function, so a door
runs unchanged on any engine (bridge.engine)."""
import ast
import pathlib

import mqksbridge.bridge

BRIDGE = pathlib.Path(mqksbridge.bridge.__file__).resolve().parent
DOORS = ("mqks", "malamute", "twino", "textqueue", "convert")


def core_imports(path):
    """(line, module) of each import of mqksbridge.core in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(n == "mqksbridge.core" or n.startswith("mqksbridge.core.") for n in names):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_no_door_imports_the_core():
    modules = [p for door in DOORS for p in sorted((BRIDGE / door).rglob("*.py"))]
    assert len(modules) > 20
    offenders = {str(p.relative_to(BRIDGE)): core_imports(p) for p in modules}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_check_sees_an_import_of_the_core(tmp_path):
    module = tmp_path / "door.py"
    module.write_text("def f():\n    from mqksbridge import core\n"
                      "from mqksbridge.core.queue import PULL\n")
    assert [line for line, _ in core_imports(module)] == [2, 3]
