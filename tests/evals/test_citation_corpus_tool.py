"""evals.citation_corpus: counts by label, framing on or off, a missing section named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.citation_corpus import main

TIMES = ["05-refunds-for-unused-labels.md", "When the money comes back"]
ROWS = [
    {
        "id": "f",
        "question": "How long do refunds take?",
        "answer": 'Refunds usually "complete within 5 business days". [1]',
        "sources": [TIMES],
        "label": "faithful",
    },
    {
        "id": "w",
        "question": "How long do refunds take?",
        "answer": 'Premium refunds "complete within 5 business days". [1]',
        "sources": [TIMES],
        "label": "wrong",
    },
]


def _write(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_counts_by_label_with_and_without_framing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, ROWS)
    assert main([str(path), "--show"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "faithful: 1 of 1 verified, 0 failed",
        "wrong: 0 of 1 verified, 1 failed",
    ]
    assert main([str(path), "--no-framing", "--show"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "w (wrong): verified",
        "faithful: 1 of 1 verified, 0 failed",
        "wrong: 1 of 1 verified, 0 failed",
    ]


def test_a_section_the_help_centre_lacks_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = ROWS[0] | {"sources": [["05-refunds-for-unused-labels.md", "No such heading"]]}
    assert main([str(_write(tmp_path, [row]))]) == 2
    assert "No such heading" in capsys.readouterr().err
