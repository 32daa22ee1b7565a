"""docs/ui.png, the search console's screenshot: a `cellar serve` over an index, queries of the
collection sent to it at a steady rate (so the live chart has something to draw), and the console
opened on one query in headless Chromium and captured through the DevTools protocol after a while.
The page runs in real time (`chromium --screenshot` with a virtual time budget would make its QPS
up), so it is driven over the protocol.

    python3 bench/ui_screenshot.py --index bench/work/scifact \
        --queries ../shared/data/scifact/queries.jsonl --out docs/ui.png
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import re
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import websockets
from PIL import Image

MAX_PNG_BYTES = 200_000


def serve(cellar: str, index: str, workers: int) -> tuple[subprocess.Popen, str]:
    command = [cellar, "serve", "--index", index, "--bind", "127.0.0.1:0", "--workers", str(workers)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert server.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep the pipe drained
            return server, found.group(1)
        if not line:
            break
    server.kill()
    raise SystemExit(f"cellar serve did not start (exit {server.poll()})")


def load(url: str, queries: list[str], rate: float, mode: str, stop: threading.Event) -> None:
    """`rate` searches a second, one after another, until `stop`."""
    rng = random.Random(45)
    while not stop.is_set():
        start = time.monotonic()
        body = json.dumps({"query": rng.choice(queries), "mode": mode, "k": 10}).encode()
        request = urllib.request.Request(f"{url}/v1/search", body, {"content-type": "application/json"})
        urllib.request.urlopen(request, timeout=30).read()
        stop.wait(max(0.0, 1 / rate - (time.monotonic() - start)))


async def capture(page: str, width: int, height: int, wait_s: float) -> bytes:
    with tempfile.TemporaryDirectory() as profile:
        command = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={profile}", "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"]
        browser = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert browser.stderr is not None
            port = None
            deadline = time.monotonic() + 60
            while port is None and time.monotonic() < deadline:
                found = re.search(r"DevTools listening on ws://127.0.0.1:(\d+)/", browser.stderr.readline())
                port = found.group(1) if found else None
            assert port, "chromium did not open its DevTools port"
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            socket_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with websockets.connect(socket_url, max_size=64 << 20) as cdp:
                ids = iter(range(1, 1 << 30))

                async def call(method: str, **params: object) -> dict:
                    id_ = next(ids)
                    await cdp.send(json.dumps({"id": id_, "method": method, "params": params}))
                    while True:
                        message = json.loads(await asyncio.wait_for(cdp.recv(), 60))
                        if message.get("id") == id_:
                            assert "error" not in message, message
                            return message["result"]

                await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
                await call("Page.navigate", url=page)
                await asyncio.sleep(wait_s)
                shot = await call("Page.captureScreenshot", format="png")
        finally:
            browser.terminate()
            browser.wait(timeout=30)
    return base64.b64decode(shot["data"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cellar", default="target/release/cellar")
    parser.add_argument("--index", required=True)
    parser.add_argument("--queries", required=True, help="the collection's queries.jsonl (BEIR)")
    parser.add_argument("--query", default="Vitamin D supplementation prevents bone fractures in older adults.")
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20, help="background searches a second")
    parser.add_argument("--seconds", type=float, default=40, help="how long the page runs before the capture")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="docs/ui.png")
    args = parser.parse_args()
    queries = [json.loads(line)["text"] for line in Path(args.queries).read_text().splitlines() if line.strip()]
    server, url = serve(args.cellar, args.index, args.workers)
    stop = threading.Event()
    loader = threading.Thread(target=load, args=(url, queries, args.rate, args.mode, stop), daemon=True)
    try:
        loader.start()
        page = f"{url}/ui?{urlencode({'q': args.query, 'mode': args.mode, 'k': args.k, 'run': 1})}"
        png = asyncio.run(capture(page, 1280, 900, args.seconds))
    finally:
        stop.set()
        loader.join(timeout=30)
        server.terminate()
        server.wait(timeout=30)
    # A palette of 256 colours (the page has few): a third of the bytes of Chromium's PNG.
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(out, "PNG", optimize=True)
    png = out.getvalue()
    assert len(png) <= MAX_PNG_BYTES, f"{len(png)} bytes: more than the {MAX_PNG_BYTES} a committed image may take"
    Path(args.out).write_bytes(png)
    print(f"{args.out}: {len(png)} bytes")


if __name__ == "__main__":
    main()
