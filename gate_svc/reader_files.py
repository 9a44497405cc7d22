"""The evidence readers shipped in this package: their files, names and digests.

Kept apart from :mod:`gate_svc.reader` so the policy core can name a reader without loading
ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from candor.file_digest import file_digest

MODELS_DIR: Final = Path(__file__).with_name("models")
DEFAULT_MODEL: Final = "v4"
MODEL_PATH: Final = MODELS_DIR / f"reader-{DEFAULT_MODEL}.onnx"


def model_digest(path: Path = MODEL_PATH) -> str:
    """:func:`candor.file_digest.file_digest` of the reader: which one a calibration was fitted
    with (``calibrated.reader_model``). Its scores mean nothing to another reader's weights."""
    return file_digest(path)


def bundled_readers() -> tuple[str, ...]:
    """Names of the readers shipped in this package (``gate.reader.model``), e.g. ``v4``."""
    return tuple(sorted(p.stem.removeprefix("reader-") for p in MODELS_DIR.glob("reader-*.onnx")))


def reader_file(model: str = DEFAULT_MODEL, model_path: str = "") -> Path:
    """The reader file settings name: ``model_path`` when set, else bundled ``model``.

    Raises :class:`ValueError` naming the bundled readers for a name that is not one of them.
    """
    if model_path:
        return Path(model_path)
    names = bundled_readers()
    if model not in names:
        raise ValueError(
            f"gate.reader.model must be one of the bundled readers {', '.join(names)}, "
            f"got {model!r} (or set gate.reader.model_path to a reader file)"
        )
    return MODELS_DIR / f"reader-{model}.onnx"


def bundled_name(digest: str) -> str:
    """The bundled reader with this digest (``v4``, ``v5``), or ``""`` for any other file."""
    for name in bundled_readers():
        if model_digest(reader_file(name)) == digest:
            return name
    return ""
