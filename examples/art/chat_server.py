"""A local OpenAI-compatible chat-completions server, for running the rollout loop offline.

The loop talks to every model over HTTP with the ``openai`` client; this server lets a model in
this process (the tiny one of ``--tiny``, or a scripted one in the tests) sit behind the same
HTTP path a real endpoint takes, so the offline run exercises what an online one does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rollout import Message


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[Message]
    max_tokens: int | None
    temperature: float | None


Answer = Callable[[ChatRequest], str]


class ChatServer(ThreadingHTTPServer):
    """Answers ``POST /v1/chat/completions`` with ``answer(request)`` and ``GET /v1/models``
    with the one model it serves, on 127.0.0.1 at a free port, from a daemon thread."""

    daemon_threads = True

    def __init__(self, answer: Answer, model: str = "local") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.model = model
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        model = {"id": self.server.model, "object": "model", "owned_by": "local"}
        self._send(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = ChatRequest(
                model=str(body["model"]),
                messages=[{"role": m["role"], "content": m["content"]} for m in body["messages"]],
                max_tokens=body.get("max_tokens"),
                temperature=body.get("temperature"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            self._send(400, {"error": {"message": f"bad request: {exc!r}"}})
            return
        content = self.server.answer(request)
        self._send(
            200,
            {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are the loop's own; the access log would only bury its output."""
