"""protocols/mqks stays sans-IO: importing it pulls in no Twisted, sockets or core."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mqks_protocol_modules_import_no_io():
    code = (
        'import sys\n'
        'import protocols.mqks.framing, protocols.mqks.requests, protocols.mqks.replies\n'
        'import protocols.mqks.masks, protocols.mqks.safe_eval\n'
        'bad = [m for m in sys.modules if m.split(".")[0] in ("twisted", "core", "bridge", "socket")]\n'
        'print(",".join(bad))\n'
    )
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == ''
