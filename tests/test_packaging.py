"""The wheel: every module of our packages under the one name `mqksbridge`, plus the
twistd drop-in, and nothing of Twisted's; installed in a fresh venv, `twistd mqksbridge`
works and the repository's directory names (`core`, `bridge`) are not importable.

`twisted/plugins/` must ship without `__init__.py` files: Twisted's own `twisted` and
`twisted.plugins` packages would be shadowed (or overwritten on install) by ours.
The build runs on a copy of the tree so `build/` and `*.egg-info` never land in it.
"""
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("core", "protocols", "bridge", "pipeline")   # installed as mqksbridge.<name>
OFFLINE_SIGNS = (
    "NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
    "No matching distribution found for setuptools", "No matching distribution found for wheel",
    "Could not find a version that satisfies the requirement setuptools",
    "Could not find a version that satisfies the requirement wheel",
)


def _local_backend_usable():
    """setuptools>=68 and wheel installed here, as pyproject.toml asks for."""
    try:
        major = int(metadata.version("setuptools").split(".")[0])
        metadata.version("wheel")
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 68


def _pip_wheel(source, out, isolated):
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."]
    if not isolated:
        command.insert(4, "--no-build-isolation")
    return subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
        ".hypothesis", "var", "dropin.cache"))
    out = tmp / "dist"
    result = None
    if _local_backend_usable():
        result = _pip_wheel(source, out, isolated=False)
    if result is None or result.returncode != 0:
        result = _pip_wheel(source, out, isolated=True)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        if any(sign in output for sign in OFFLINE_SIGNS):
            pytest.skip("no network and no local setuptools>=68 + wheel to build with")
        raise AssertionError(f"pip wheel failed:\n{output}")
    wheels = list(out.glob("mqksbridge-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel_names(wheel):
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_wheel_holds_only_mqksbridge_and_the_drop_in(wheel_names):
    tops = {name.split("/")[0] for name in wheel_names if not name.startswith("mqksbridge-")}
    assert tops == {"mqksbridge", "twisted"}, tops
    assert [n for n in wheel_names if n.startswith("twisted/")] == [
        "twisted/plugins/mqksbridge_plugin.py"]


def test_wheel_ships_the_twistd_plugin_without_twisted_init_files(wheel_names):
    assert "twisted/plugins/mqksbridge_plugin.py" in wheel_names
    assert "twisted/__init__.py" not in wheel_names
    assert "twisted/plugins/__init__.py" not in wheel_names
    assert not [n for n in wheel_names if n.startswith("twisted/") and n.endswith("__init__.py")]


def test_wheel_holds_every_module_of_our_packages(wheel_names):
    for package in PACKAGES:
        assert f"mqksbridge/{package}/__init__.py" in wheel_names
    modules = set()
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    modules.add("mqksbridge/" + os.path.relpath(os.path.join(folder, name), ROOT)
                                .replace(os.sep, "/"))
    assert "mqksbridge/bridge/mqks/door.py" in modules
    assert "mqksbridge/protocols/mqks/framing.py" in modules
    missing = sorted(modules - wheel_names)
    assert not missing, f"modules left out of the wheel (setup.cfg packages?): {missing}"


def test_wheel_ships_the_dashboard_and_the_console_script(wheel, wheel_names):
    """The admin endpoint serves its page, scripts and OpenAPI file from package data."""
    static = os.path.join(ROOT, "bridge", "admin", "static")
    shipped = sorted(os.listdir(static))
    assert {"index.html", "dashboard.js", "dashboard.css", "openapi.json"} <= set(shipped)
    for name in shipped:
        assert f"mqksbridge/bridge/admin/static/{name}" in wheel_names, name
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        text = archive.read(entry_points).decode()
    assert "mqksbridge = mqksbridge.bridge.cli:main" in text


def test_the_broker_never_imports_the_test_extra():
    """The test extra (construct for the protocols' schemas, the test tools) is not
    installed with the broker: every module of core, protocols and bridge but the
    schemas, and the twistd drop-in, import without it."""
    probe = (
        "import importlib, pkgutil, sys\n"
        "import mqksbridge.bridge, mqksbridge.core, mqksbridge.protocols\n"
        "from twisted.plugins import mqksbridge_plugin\n"
        "count = 0\n"
        "for pkg in (mqksbridge.core, mqksbridge.protocols, mqksbridge.bridge):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('.schema'):\n"
        "            importlib.import_module(m.name)\n"
        "            count += 1\n"
        "extra = {'construct', 'hypothesis', 'pytest', 'selenium', 'jsonschema', 'textqueue'}\n"
        "print(count, sorted({m.split('.')[0] for m in sys.modules} & extra))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    count, imported = out.stdout.split(" ", 1)
    assert int(count) > 50 and imported.strip() == "[]", out.stdout


def test_the_wheel_in_a_fresh_venv_runs_twistd_mqksbridge(wheel, tmp_path):
    """Installed from the wheel (dependencies from the package index): the drop-in is
    found, and only `mqksbridge` is importable, not the repository's directory names."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)],
                               timeout=600, capture_output=True, text=True)
    if installed.returncode and any(s in installed.stderr for s in OFFLINE_SIGNS):
        pytest.skip("no package index to install the wheel's dependencies from")
    assert installed.returncode == 0, installed.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = dict(cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    help_text = subprocess.run([str(venv / "bin" / "twistd"), "mqksbridge", "--help"], **run)
    assert help_text.returncode == 0, help_text.stderr
    assert "--config" in help_text.stdout
    cli = subprocess.run([str(venv / "bin" / "mqksbridge"), "--help"], **run)
    assert cli.returncode == 0 and "publish" in cli.stdout, cli.stderr
    page = subprocess.run([python, "-c", "from mqksbridge.bridge.admin.web import static_file;"
                           "print(len(static_file('index.html')))"], **run)
    assert page.returncode == 0 and int(page.stdout) > 500, page.stderr
    probe = ("import importlib.util as u, mqksbridge.core, mqksbridge.bridge.service;"
             "print([n for n in ('core', 'protocols', 'bridge', 'tests') if u.find_spec(n)])")
    names = subprocess.run([python, "-c", probe], **run)
    assert names.returncode == 0, names.stderr
    assert names.stdout.strip() == "[]"
    assert str(venv) in subprocess.run(
        [python, "-c", "import mqksbridge.core as c; print(c.__file__)"], **run).stdout
