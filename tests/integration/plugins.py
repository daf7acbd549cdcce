"""Handler modules of the tests, made findable by a ``queuey worker`` subprocess."""

from __future__ import annotations

from pathlib import Path


def plugin_path(folder: Path, name: str, module: str) -> Path:
    """A folder to put on ``PYTHONPATH`` so that ``queuey worker`` finds the handlers of
    ``module``: entry point ``name`` of a made-up distribution ``queuey-test-NAME``."""
    dist = folder / f"queuey_test_{name}-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: queuey-test-{name}\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[queuey.handlers]\n{name} = {module}\n")
    return folder
