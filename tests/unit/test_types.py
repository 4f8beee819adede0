"""The service node keeps the type discipline pyproject.toml declares
(`[tool.mypy] strict`, over service/lattice and protocol/pluggen)."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_service_node_is_mypy_strict_clean() -> None:
    mypy = ROOT / ".venv" / "bin" / "mypy"
    assert mypy.exists(), "mypy is a test dependency: run scripts/setup.sh"
    p = subprocess.run([str(mypy)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
