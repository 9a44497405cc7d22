"""onnxruntime, imported with its telemetry off.

ONNX Runtime 1.31 writes a device id and an event database under ``$XDG_CACHE_HOME/Microsoft``
(``$HOME/.cache`` when unset) and looks up Microsoft's telemetry host from every process that loads
it (seen with strace). Our services run models on tenants' questions and must not phone home; the
switch is read when the library loads, so every import of it goes through here.
"""

from __future__ import annotations

import os

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnxruntime as ort

__all__ = ["ort"]
