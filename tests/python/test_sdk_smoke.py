"""The harness itself: the openai SDK streams a chat completion through reprise."""

from __future__ import annotations

from typing import Callable

import openai

from conftest import Mock, Proxy


def test_openai_chat_stream_through_proxy(mock: Mock, proxy: Proxy, prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=20]")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": p}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == mock.text(p)
    assert text
    assert mock.settled(p)["entry"]["generations"] == 1
