"""The Python test harness: reprise and the fake model (cmd/mockllm) as real
processes on loopback, a link that cuts answers mid-way, and unique prompts.

Fixtures (names are the contract of /work/notes/pyharness.md):
  mock, proxy, proxy_no_keyless (session), cut_link, prompt (function).
Nothing here mocks a part: the SDKs talk HTTP to the real binaries.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[2]

# How long a harness wait may take before it fails (a bound, not a pacing):
# generous, so a busy 2-core box beside a CPU burner still passes.
WAIT = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str, headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=WAIT) as resp:
        return json.load(resp)


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Waits until GET url answers 200 (the process is up), or fails with its log."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited ({proc.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}: not up within {WAIT}s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's directory: binaries, the proxies' data and the logs
    (mockllm.log, proxy.log, proxy-no-keyless.log), kept after the run as
    pytest keeps its temporary directories (--basetemp to choose where)."""
    return tmp_path_factory.mktemp("reprise")


@dataclass
class Binaries:
    reprise: str
    mockllm: str


@pytest.fixture(scope="session")
def binaries(workdir: Path) -> Binaries:
    """reprise and mockllm built from this tree (REPRISE_BIN / MOCKLLM_BIN override)."""
    out: dict[str, str] = {}
    for name, env in (("reprise", "REPRISE_BIN"), ("mockllm", "MOCKLLM_BIN")):
        if os.environ.get(env):
            out[name] = os.environ[env]
            continue
        path = workdir / "bin" / name
        subprocess.run(["go", "build", "-o", str(path), f"./cmd/{name}"], cwd=REPO, check=True)
        out[name] = str(path)
    return Binaries(reprise=out["reprise"], mockllm=out["mockllm"])


@dataclass
class Mock:
    """cmd/mockllm: the fake model and its ledger."""

    url: str

    def ledger(self, prompt: str) -> dict[str, Any]:
        """GET /ledger?prompt=P: {"prompt", "entry": {requests, generations,
        completed, tokens}, "generations": [{..., content, completed, aborted}]}."""
        return dict(_get_json(self.url + "/ledger?" + urllib.parse.urlencode({"prompt": prompt})))

    def settled(self, prompt: str, generations: int = 1, timeout: float = WAIT) -> dict[str, Any]:
        """Waits until prompt has at least `generations` generations and every
        one it started has finished (completed or aborted); returns the report.
        A client that read its answer may be ahead of the ledger, and a
        generation whose client left may still be running."""
        deadline = time.monotonic() + timeout
        while True:
            report = self.ledger(prompt)
            gens = report["generations"]
            if len(gens) >= generations and all(g["completed"] or g["aborted"] for g in gens):
                return report
            if time.monotonic() > deadline:
                raise AssertionError(f"ledger of {prompt!r} not settled at {generations} generations within {timeout}s: {report}")
            time.sleep(0.02)

    def text(self, prompt: str) -> str:
        """The content of the prompt's first generation, once it completed:
        the exact text a client must receive."""
        report = self.settled(prompt, 1)
        first = report["generations"][0]
        assert first["completed"], f"the first generation of {prompt!r} did not complete: {report}"
        return str(first["content"])


@pytest.fixture(scope="session")
def mock(binaries: Binaries, workdir: Path) -> Iterator[Mock]:
    port = _free_port()
    log = workdir / "mockllm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binaries.mockllm, "--listen", f"127.0.0.1:{port}", "--delay", "2ms", "--tokens", "24"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    m = Mock(url=f"http://127.0.0.1:{port}")
    try:
        _wait_http(m.url + "/ledger", proc, log)
        yield m
    finally:
        _stop(proc)


@pytest.fixture(scope="session", autouse=True)
def warm_sdks(mock: Mock) -> None:
    """One call of each API, streamed and not, straight to the fake model
    before any test: the SDKs build their response models on first use
    (about a second for the Responses events), holding the interpreter lock
    in long stretches; a test's link thread starved meanwhile would cut an
    answer reprise had long written whole."""
    import anthropic
    import openai

    o = openai.OpenAI(base_url=mock.url + "/v1", api_key="unused", max_retries=0)
    a = anthropic.Anthropic(base_url=mock.url, api_key="unused", max_retries=0)
    p = f"warm-up {uuid.uuid4().hex} [tokens=3]"
    for stream in (False, True):
        for r in (
            o.chat.completions.create(model="m", messages=[{"role": "user", "content": p}], stream=stream),
            o.responses.create(model="m", input=p, stream=stream),
            a.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": p}], stream=stream),
        ):
            if stream:
                for _ in r:  # type: ignore[union-attr]
                    pass


@dataclass
class Proxy:
    """A reprise process in front of mock."""

    url: str
    log: Path
    # keyless: recognises keyless retries (the default); False with --keyless-retry-window 0.
    keyless: bool

    def status(self, key: str) -> dict[str, Any]:
        """GET /v1/streams/{key} as JSON."""
        return dict(_get_json(f"{self.url}/v1/streams/{urllib.parse.quote(key, safe='')}", {"Accept": "application/json"}))

    def attempts(self, key: str) -> Any:
        """GET /v1/streams/{key}/attempts as JSON."""
        return _get_json(f"{self.url}/v1/streams/{urllib.parse.quote(key, safe='')}/attempts", {"Accept": "application/json"})


def _start_proxy(binaries: Binaries, workdir: Path, mock: Mock, name: str, keyless: bool) -> Iterator[Proxy]:
    port = _free_port()
    data = workdir / name
    log = workdir / f"{name}.log"
    level = os.environ.get("REPRISE_PY_LOG_LEVEL", "warn")
    # The flags below are all its settings: no REPRISE_* variable of the
    # environment (REPRISE_BIN, the CI's) reaches it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPRISE_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binaries.reprise,
                "--auth", "none",
                "--listen", f"127.0.0.1:{port}",
                "--data", str(data),
                "--upstream", mock.url,
                "--log-level", level,
                "--log-format", "text",
                # A busy test box must not shed generations for journal lag.
                "--shed-lag", "0",
                *([] if keyless else ["--keyless-retry-window", "0"]),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    p = Proxy(url=f"http://127.0.0.1:{port}", log=log, keyless=keyless)
    try:
        _wait_http(p.url + "/readyz", proc, log)
        yield p
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def proxy(binaries: Binaries, workdir: Path, mock: Mock) -> Iterator[Proxy]:
    """reprise with keyless recognition on (its default)."""
    yield from _start_proxy(binaries, workdir, mock, "proxy", True)


@pytest.fixture(scope="session")
def proxy_no_keyless(binaries: Binaries, workdir: Path, mock: Mock) -> Iterator[Proxy]:
    """reprise with keyless recognition off (--keyless-retry-window 0)."""
    yield from _start_proxy(binaries, workdir, mock, "proxy-no-keyless", False)


@pytest.fixture(params=["proxy", "proxy_no_keyless"], ids=["keyless", "no_keyless"])
def either_proxy(request: pytest.FixtureRequest) -> Proxy:
    """Each test once against proxy and once against proxy_no_keyless."""
    p = request.getfixturevalue(request.param)
    assert isinstance(p, Proxy)
    return p


# Generations per logical call, by pattern and proxy: printed at the end of
# the run and written to generations.json in pytest's temporary directory.
GENERATIONS: dict[str, dict[str, int]] = {}


@pytest.fixture
def record_generations() -> Callable[[str, Proxy, int], None]:
    """record_generations(pattern, proxy, n): n generations for one logical call of pattern."""

    def record(pattern: str, p: Proxy, n: int) -> None:
        GENERATIONS.setdefault(pattern, {})["with recognition" if p.keyless else "without"] = n

    return record


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not GENERATIONS:
        return
    path = config._tmp_path_factory.getbasetemp() / "generations.json"  # type: ignore[attr-defined]
    path.write_text(json.dumps(GENERATIONS, indent=2, sort_keys=True) + "\n")
    width = max(len(k) for k in GENERATIONS)
    terminalreporter.section("upstream generations per logical call")
    terminalreporter.write_line(f"{'pattern':<{width}}  with recognition  without")
    for pattern in sorted(GENERATIONS):
        row = GENERATIONS[pattern]
        terminalreporter.write_line(f"{pattern:<{width}}  {row.get('with recognition', '-')!s:>16}  {row.get('without', '-')!s:>7}")
    terminalreporter.write_line(f"(also in {path})")


class _Conn:
    """One relayed connection: its two sockets and a wake-up pair through
    which cut_open tells its relay thread to cut it."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.wake_r, self.wake_w = socket.socketpair()
        self.answered = 0  # answer bytes passed on to the client
        self.cut = False  # cut_open cut it: nothing more passes


@dataclass
class Link:
    """A loopback TCP proxy in front of a target that cuts answers."""

    url: str
    cut_after: int
    times: int | None
    _target: tuple[str, int]
    _listener: socket.socket
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cuts: int = 0
    _conns: list[_Conn] = field(default_factory=list)
    _closed: bool = False

    @property
    def cuts(self) -> int:
        """Connections this link cut."""
        with self._lock:
            return self._cuts

    def cut_open(self) -> list[int]:
        """Cuts (resets) every connection open now, whatever its answer's
        length; they count in cuts. Returns, for each, the answer bytes it
        had passed on (0: its client had nothing of the answer yet). For a
        client waiting for an answer not yet begun, as behind a middlebox
        that drops a connection while a non-streamed answer is generated."""
        with self._lock:
            conns, self._conns = self._conns, []
            self._cuts += len(conns)
            answered = [c.answered for c in conns]
            for c in conns:
                c.cut = True
        for c in conns:
            try:
                c.wake_w.send(b"x")
            except OSError:
                pass
        return answered

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=WAIT)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            c = _Conn(client, upstream)
            with self._lock:
                if self._closed:
                    self._end(c, reset=True)
                    return
                self._conns.append(c)
            threading.Thread(target=self._relay, args=(c,), daemon=True).start()

    def _claim_cut(self) -> bool:
        with self._lock:
            if self.times is not None and self._cuts >= self.times:
                return False
            self._cuts += 1
            return True

    def _relay(self, c: _Conn) -> None:
        """Copies both ways on one thread (so a cut closes sockets no other
        thread is blocked on: the close resets at once). The answer is cut
        after cut_after bytes when it is one of the first `times` answers to
        exceed it; an end on one side is passed on as a half-close."""
        client, upstream = c.client, c.upstream
        cutting: bool | None = None  # decided when the answer first exceeds cut_after
        peer = {client: upstream, upstream: client}
        open_ = {client, upstream}
        reset = True
        with selectors.DefaultSelector() as sel:
            for s in (client, upstream, c.wake_r):
                sel.register(s, selectors.EVENT_READ)
            try:
                while open_:
                    for key, _ in sel.select():
                        src = key.fileobj
                        if src is c.wake_r:
                            return  # cut_open
                        assert isinstance(src, socket.socket)
                        dst = peer[src]
                        data = src.recv(65536)
                        if not data:
                            sel.unregister(src)
                            open_.discard(src)
                            dst.shutdown(socket.SHUT_WR)
                            continue
                        if src is upstream and cutting is not False and c.answered + len(data) > self.cut_after:
                            if cutting is None:
                                cutting = self._claim_cut()
                            if cutting:
                                dst.sendall(data[: self.cut_after - c.answered])
                                return
                        with self._lock:
                            if c.cut:
                                return
                            if src is upstream:
                                c.answered += len(data)
                        dst.sendall(data)
                reset = False
            except OSError:
                pass  # a side reset or failed: pass the failure on
            finally:
                self._end(c, reset)

    def _end(self, c: _Conn, reset: bool) -> None:
        with self._lock:
            if c in self._conns:
                self._conns.remove(c)
        for s in (c.client, c.upstream):
            if reset:
                _reset(s)
            else:
                s.close()
        c.wake_r.close()
        c.wake_w.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._listener.close()
        self.cut_open()


def _reset(s: socket.socket) -> None:
    """Closes s with SO_LINGER 0: the peer sees a reset, not an orderly end."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


@pytest.fixture
def cut_link() -> Iterator[Callable[..., Link]]:
    """A factory: cut_link(target_url, cut_after=BYTES, times=N or None).
    Of the connections whose answer exceeds cut_after bytes, the first
    `times` (None: every one) are cut after cut_after bytes of it. A request
    is always forwarded whole."""
    links: list[Link] = []

    def make(target_url: str, cut_after: int, times: int | None = 1) -> Link:
        u = urllib.parse.urlsplit(target_url)
        assert u.hostname and u.port, target_url
        ln = socket.socket()
        ln.bind(("127.0.0.1", 0))
        ln.listen(64)
        port = ln.getsockname()[1]
        link = Link(url=f"http://127.0.0.1:{port}", cut_after=cut_after, times=times, _target=(u.hostname, u.port), _listener=ln)
        threading.Thread(target=link._serve, daemon=True).start()
        links.append(link)
        return link

    yield make
    for link in links:
        link.close()


@pytest.fixture
def prompt(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """prompt(directives) -> a prompt unique to this test, directives appended."""

    def make(directives: str = "") -> str:
        name = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name)
        return f"{name} {uuid.uuid4().hex} {directives}".strip()

    return make
