"""The models a rollout loop can drive: anything with ``chat`` and (to learn) ``train``.

``OpenAIModel`` talks to any OpenAI-compatible chat-completions endpoint with the official
client; it samples but cannot be trained (the weights are not ours). ``VLLMModel`` serves a
local model with vLLM's OpenAI-compatible server for sampling and trains it with
``policy.PolicyGradient``, restarting the server on each new checkpoint. vLLM needs a CUDA GPU:
without one it raises ``GPURequiredError`` before starting anything. ``LocalModel`` is the
offline, CPU counterpart: a small local model behind ``chat_server.ChatServer``, sampled over
HTTP like the others and trained in place.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from chat_server import ChatRequest, ChatServer
from rollout import Message, Trajectory


class GPURequiredError(RuntimeError):
    """This model cannot run on this machine (no CUDA GPU, or vLLM missing)."""


class TrainableModel(Protocol):
    name: str
    trainable: bool
    """False when ``train`` cannot change the model (a remote API): use a dry run."""

    async def chat(self, messages: Sequence[Message]) -> str: ...

    async def train(
        self, groups: Sequence[Sequence[Trajectory]], learning_rate: float
    ) -> dict[str, float]: ...

    async def aclose(self) -> None: ...


class OpenAIModel:
    """A model behind an OpenAI-compatible endpoint (``base_url``; the API key comes from
    ``OPENAI_API_KEY``, and local servers accept any)."""

    trainable = False

    def __init__(
        self,
        name: str,
        base_url: str | None = None,
        *,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        http_client: Any = None,
    ) -> None:
        from openai import AsyncOpenAI

        self.name = name
        self.base_url = base_url
        self.temperature = temperature
        self.max_tokens = max_tokens
        api_key = os.environ.get("OPENAI_API_KEY") or ("unused" if base_url else None)
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http_client)

    async def chat(self, messages: Sequence[Message]) -> str:
        response = await self._client.chat.completions.create(
            model=self.name,
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],  # type: ignore[misc]
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return response.choices[0].message.content or ""

    async def train(
        self, groups: Sequence[Sequence[Trajectory]], learning_rate: float
    ) -> dict[str, float]:
        raise TypeError(f"{self.name} at {self.base_url} serves fixed weights; use a dry run")

    async def aclose(self) -> None:
        await self._client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMModel:
    """A local model: sampled through a vLLM OpenAI-compatible server, trained in-process."""

    trainable = True

    def __init__(
        self,
        name: str,
        *,
        checkpoint_dir: str | Path = "art_results/checkpoints",
        gpu_memory_utilization: float = 0.3,
        startup_timeout: float = 900.0,
    ) -> None:
        import importlib.util

        import torch

        if not torch.cuda.is_available():
            raise GPURequiredError(
                "vLLM needs an NVIDIA GPU with CUDA, and none is available here. To run the "
                "loop without one: --tiny (a tiny local model, offline, on CPU), or point it "
                "at an OpenAI-compatible server: --use-openai --base-url URL --dry-run"
            )
        if importlib.util.find_spec("vllm") is None:
            raise GPURequiredError("vLLM is not installed: pip install vllm")
        self.name = name
        self.weights: str | Path = name
        self.checkpoint_dir = Path(checkpoint_dir)
        self.gpu_memory_utilization = gpu_memory_utilization
        self.startup_timeout = startup_timeout
        self._server: subprocess.Popen[bytes] | None = None
        self._client: OpenAIModel | None = None
        self._policy: Any = None
        self._updates = 0

    async def start(self) -> None:
        """Serve the current weights (the hub model, then each checkpoint) under ``name``."""
        await self._stop_server()
        port = _free_port()
        self._server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(self.weights),
                "--served-model-name",
                self.name,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--gpu-memory-utilization",
                str(self.gpu_memory_utilization),
            ]
        )
        base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + self.startup_timeout
        while not await asyncio.to_thread(_answers, f"{base_url}/models"):
            if self._server.poll() is not None:
                raise RuntimeError(f"the vLLM server exited with {self._server.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the vLLM server did not start in {self.startup_timeout}s")
            await asyncio.sleep(2)
        self._client = OpenAIModel(self.name, base_url)

    async def chat(self, messages: Sequence[Message]) -> str:
        if self._client is None:
            await self.start()
        assert self._client is not None
        return await self._client.chat(messages)

    async def train(
        self, groups: Sequence[Sequence[Trajectory]], learning_rate: float
    ) -> dict[str, float]:
        """One policy-gradient update, then serve the new checkpoint."""
        from policy import PolicyGradient

        if self._policy is None:
            self._policy = PolicyGradient(self.name, device="cuda")
        metrics: dict[str, float] = await asyncio.to_thread(
            self._policy.step, groups, learning_rate
        )
        self._updates += 1
        self.weights = self.checkpoint_dir / f"step-{self._updates}"
        await asyncio.to_thread(self._policy.save, self.weights)
        await self.start()
        return metrics

    async def _stop_server(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                await asyncio.to_thread(self._server.wait, 60)
            except subprocess.TimeoutExpired:
                self._server.kill()
        self._server = None

    async def aclose(self) -> None:
        await self._stop_server()


class LocalModel:
    """A model on local disk, served by a ``ChatServer`` in this process and trained in place on
    CPU: the server samples from the very weights each update changes, so no restart is needed.
    Sampling and training take turns under one lock."""

    trainable = True

    def __init__(self, path: str | Path, *, name: str = "local", max_tokens: int = 64) -> None:
        import torch
        from openai import DefaultAsyncHttpxClient
        from policy import PolicyGradient

        # A small model on CPU runs fastest on one thread: more only contend for the cores
        # the sandboxes need.
        torch.set_num_threads(1)
        self.name = name
        self.max_tokens = max_tokens
        self._policy = PolicyGradient(path, device="cpu")
        self._lock = threading.Lock()
        self._server = ChatServer(self._answer, name).start()
        # A loopback server: a proxy from the environment must not stand in between.
        self._client = OpenAIModel(
            name,
            self._server.url,
            max_tokens=max_tokens,
            http_client=DefaultAsyncHttpxClient(trust_env=False),
        )

    def _answer(self, request: ChatRequest) -> str:
        import torch

        tokenizer, model = self._policy.tokenizer, self._policy.model
        with self._lock, torch.no_grad():
            model.eval()
            ids = tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            temperature = request.temperature or 1.0
            output = model.generate(
                **ids,
                do_sample=True,
                temperature=temperature,
                max_new_tokens=request.max_tokens or self.max_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        return str(
            tokenizer.decode(output[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        )

    @property
    def url(self) -> str:
        return self._server.url

    async def chat(self, messages: Sequence[Message]) -> str:
        return await self._client.chat(messages)

    async def train(
        self, groups: Sequence[Sequence[Trajectory]], learning_rate: float
    ) -> dict[str, float]:
        def step() -> dict[str, float]:
            with self._lock:
                metrics: dict[str, float] = self._policy.step(groups, learning_rate)
                return metrics

        return await asyncio.to_thread(step)

    async def aclose(self) -> None:
        await self._client.aclose()
        self._server.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False
