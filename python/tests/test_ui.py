"""The search console (`/ui` of `cellar serve`) in headless Chromium: the page runs the query of
its URL, and its hits, scores and timing bar render; an error answer shows its message; on a
server with an API key the page loads, its search sent without the key shows the 401, and with
the key typed into its field (kept for the next visit) it answers."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from itertools import count
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from servers import cellar_binary, start
from test_embeddings import documents

import cellar

KEY = "console-key"
CHROMIUM_TIMEOUT_S = 90
# Virtual milliseconds the page runs before its DOM is dumped: its loads, the search and two
# polls of /metrics (virtual time does not advance while a fetch is pending).
VIRTUAL_TIME_MS = 5000


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: `make setup` installs it (apt-get install chromium)", pytrace=False)
    return found


@pytest.fixture(scope="module")
def console_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[cellar.Index, Path]:
    """60 documents with texts (so BM25 answers without a model): `document i about topic{i % 16}`."""
    ids, vectors, texts = documents(60, seed=5)
    path = tmp_path_factory.mktemp("console") / "idx"
    return cellar.Index.from_embeddings(path, ids, vectors, texts=texts), path


def serve(index: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """`cellar serve` on an ephemeral loopback port, its output in `log`: (it, its URL)."""
    command = [str(cellar_binary()), "serve", "--index", str(index), "--lazy-encoder", "--workers", "1"]
    return start([*command, "--bind", "127.0.0.1:0", *extra], log)


@pytest.fixture(scope="module")
def open_server(console_index: tuple[cellar.Index, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, url = serve(console_index[1], tmp_path_factory.mktemp("open") / "serve.log")
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def keyed_server(console_index: tuple[cellar.Index, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("keyed")
    (root / "key").write_text(KEY + "\n")
    server, url = serve(console_index[1], root / "serve.log", "--api-key-file", str(root / "key"))
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


class Page(HTMLParser):
    """A dumped DOM: each element's attributes, and the text under each element with an id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag not in {"input", "meta", "link", "br", "img", "line", "path", "circle"}:
            self._open.append((tag, attributes.get("id")))
            if attributes.get("id"):
                self.texts[attributes["id"]] = ""

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, id_ in self._open:
            if id_:
                self.texts[id_] += data

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [a for _, a in self.elements if name in a.get("class", "").split()]

    def by_id(self, id_: str) -> dict[str, str]:
        found = [a for _, a in self.elements if a.get("id") == id_]
        assert len(found) == 1, f"{len(found)} elements with id {id_!r}"
        return found[0]


def console(url: str, tmp_path: Path, **params: str) -> Page:
    """The console's DOM after it ran the query of `params` (a fresh profile: no stored key)."""
    page = f"{url}/ui?{urlencode({**params, 'run': '1'})}"
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    command += [f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--dump-dom", page]
    run = subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    assert run.returncode == 0 and "query-form" in run.stdout, f"chromium failed ({run.returncode}):\n{run.stderr[-2000:]}"
    return Page(run.stdout)


def test_the_console_runs_the_query_of_its_url_and_draws_hits_scores_and_timings(
    console_index: tuple[cellar.Index, Path], open_server: str, tmp_path: Path
) -> None:
    page = console(open_server, tmp_path, q="topic7", mode="bm25", k="3")
    assert page.by_id("message").get("hidden") is not None, page.texts.get("message")
    expected = console_index[0].search("topic7", mode="bm25", k=3)
    rows = page.with_class("hit")
    assert [r["data-id"] for r in rows] == expected.ids == ["d7", "d23", "d39"]
    assert page.texts["first-stage-name"] == "BM25"
    first = page.texts["hits"]
    assert f"{expected.scores[0]:.3f}" in first and "document 7 about topic7" in first
    # The timing bar: one segment per stage that took time, each labelled; every stage in the legend.
    segments = page.with_class("seg")
    assert "first_stage" in [s["data-stage"] for s in segments], segments
    assert all(float(s["data-ms"]) > 0 and s["title"] for s in segments)
    legend = page.texts["timing-legend"]
    for label in ["queue", "encode", "first stage", "read", "hidden read", "MaxSim", "fuse", "text"]:
        assert label in legend, legend
    assert page.by_id("timing").get("hidden") is None and page.by_id("results").get("hidden") is None
    # The live chart was drawn from two readings of /metrics at least.
    assert page.with_class("qps") and page.with_class("p95"), page.texts["chart"]
    assert page.texts["live-now"].startswith("QPS "), page.texts["live-now"]


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({"q": "topic7", "mode": "no-such-mode"}, "400", "unknown mode"),
        ({"q": "topic7", "mode": "bm25", "filter": "{not json"}, "", "The filter is not JSON"),
        ({"q": "topic7", "mode": "dense"}, "400", "no model"),
    ],
)
def test_an_error_answer_shows_its_message(
    open_server: str, tmp_path: Path, params: dict[str, str], status: str, message: str
) -> None:
    page = console(open_server, tmp_path, **params)
    box = page.by_id("message")
    assert box.get("hidden") is None and box.get("data-status") == status, box
    assert message in page.texts["message"], page.texts["message"]
    assert not page.with_class("hit")


def test_with_an_api_key_the_page_loads_and_its_search_without_the_key_shows_the_401(
    keyed_server: str, tmp_path: Path
) -> None:
    page = console(keyed_server, tmp_path, q="topic7", mode="bm25")
    assert page.by_id("mode")  # the page and its script loaded; the modes came from /openapi.json
    assert "bm25" in page.texts["mode"] and "hybrid" in page.texts["mode"]
    box = page.by_id("message")
    assert box.get("hidden") is None and box.get("data-status") == "401", box
    assert "needs an API key" in page.texts["message"] and "API key field" in page.texts["message"]
    assert not page.with_class("hit")


class DevTools:
    """One headless Chromium tab driven over `--remote-debugging-pipe` (the browser reads the
    DevTools protocol on fd 3 and writes on fd 4, each message ended by a NUL), every wait bounded
    by CHROMIUM_TIMEOUT_S."""

    def __init__(self, profile: Path) -> None:
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()
        shell = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        args = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--remote-debugging-pipe"]
        self.browser = subprocess.Popen(
            ["bash", "-c", shell, chromium(), *args],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._ids = count(1)
        self._deadline = time.monotonic() + CHROMIUM_TIMEOUT_S
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _receive(self) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from], [], [], max(0.0, self._deadline - time.monotonic()))
            assert ready, f"Chromium did not answer within {CHROMIUM_TIMEOUT_S} s"
            chunk = os.read(self._from, 1 << 16)
            assert chunk, f"Chromium exited ({self.browser.poll()})"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        id_ = next(self._ids)
        message: dict = {"id": id_, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == id_:
                assert "error" not in reply, reply
                return reply["result"]

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=self._session, url=url)

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", session=self._session, expression=expression, returnByValue=True)
        return result["result"].get("value")

    def wait_for(self, condition: str) -> None:
        while not self.evaluate(f"(() => {{ try {{ return !!({condition}); }} catch (_) {{ return false; }} }})()"):
            assert time.monotonic() < self._deadline, f"not within {CHROMIUM_TIMEOUT_S} s: {condition}"
            time.sleep(0.05)

    def close(self) -> None:
        try:
            self.browser.terminate()
            self.browser.wait(timeout=30)
        finally:
            os.close(self._to)
            os.close(self._from)


def test_with_the_key_typed_into_its_field_the_page_answers_and_keeps_the_key(keyed_server: str, tmp_path: Path) -> None:
    browser = DevTools(tmp_path / "profile")
    try:
        browser.open(f"{keyed_server}/ui")
        browser.wait_for("document.getElementById('mode').options.length > 1")
        browser.evaluate(
            f"const key = document.getElementById('api-key'); key.value = {json.dumps(KEY)};"
            "key.dispatchEvent(new Event('input'))"
        )
        # A later visit (the key from localStorage) runs the query of its URL with it.
        browser.open(f"{keyed_server}/ui?" + urlencode({"q": "topic7", "mode": "bm25", "k": "3", "run": "1"}))
        browser.wait_for("document.querySelector('tr.hit') || !document.getElementById('message').hidden")
        page = Page(str(browser.evaluate("document.documentElement.outerHTML")))
        assert page.by_id("message").get("hidden") is not None, page.texts["message"]
        assert [r["data-id"] for r in page.with_class("hit")] == ["d7", "d23", "d39"]
        assert browser.evaluate("document.getElementById('api-key').value") == KEY
        assert KEY not in str(browser.evaluate("location.href")), "the key never goes into the URL"
    finally:
        browser.close()
