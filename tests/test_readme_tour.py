"""README's tour is what the tool prints: docs/tour.py runs every step on the sample."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_tour_matches_the_tool():
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "tour.py"), "--check"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "agrees with edgeopt on 12 steps" in done.stdout
