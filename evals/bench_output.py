"""Where a benchmark writes: its table appended to a Markdown file, its figures as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def prepare(*paths: Path | None) -> None:
    """Make the output directories before a long run, not after it."""
    for path in paths:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)


def publish(text: str, out: Path | None, json_path: Path | None, figures: Any) -> None:
    """Print the table, append it to ``out`` and write ``figures`` to ``json_path`` (each
    when given)."""
    print(text)
    if out is not None:
        with out.open("a") as f:
            f.write("\n" + text)
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
