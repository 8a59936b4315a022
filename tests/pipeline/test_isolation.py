"""The broker never imports the pipeline's heavy dependencies: they are an optional extra."""
import subprocess
import sys

HEAVY = ("pyspark", "pyarrow", "pandas", "matplotlib", "tqdm", "py4j", "numpy")


def test_the_broker_does_not_import_the_pipeline_extra():
    probe = ("import sys, mqksbridge.bridge.service, mqksbridge.bridge.config, "
             "mqksbridge.protocols.textqueue.columns; "
             "from twisted.plugins import mqksbridge_plugin; "
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
