"""A real OpenAI-compatible ``/chat/completions`` server on a local port, for service tests.

The services build their own HTTP clients from settings, so the service tests point
``base_url`` here. Each request goes to ``reply(body)``, which returns a chat.completion body
(see ``tests.rerank.fakes.oa_completion``), an ``(status, body)`` pair, or a float: seconds to
stall before closing the connection.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

Reply = httpx.Response | float
Handler = Callable[[dict[str, Any]], Reply]


class FakeLLM:
    """Records request bodies; ``handler`` may be swapped while the server runs."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.bodies: list[dict[str, Any]] = []
        self.base_url = ""

    def prompts(self, needle: str) -> list[dict[str, Any]]:
        """The requests whose system prompt contains ``needle``."""
        return [b for b in self.bodies if needle in b["messages"][0]["content"]]


def system_prompt(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def user_message(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


@contextmanager
def fake_llm(handler: Handler) -> Iterator[FakeLLM]:
    llm = FakeLLM(handler)

    class Handle(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            llm.bodies.append(body)
            reply = llm.handler(body)
            if isinstance(reply, float):
                time.sleep(reply)
                return
            data = reply.read()
            self.send_response(reply.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    llm.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield llm
    finally:
        server.shutdown()
        server.server_close()
