"""Load an HTML file in a real headless Chromium and report what a reader's browser saw.

Talks the Chrome DevTools Protocol over a websocket (tornado's client, already
installed with Jupyter), so no browser-automation package is needed: console
errors, uncaught exceptions, failed or external network loads, and a DOM
summary (tables, images that decoded, element ids) evaluated in the page.
Outside hosts do not resolve (``--host-resolver-rules``), so a page that needs
the network fails visibly.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

#: evaluated in the page once it has loaded
SUMMARY_JS = """JSON.stringify({
  tables: document.querySelectorAll('table').length,
  images: document.images.length,
  images_decoded: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  scripts_external: Array.from(document.scripts).filter(s => s.src).map(s => s.src),
  text: document.body ? document.body.innerText : '',
  page_width: document.documentElement.scrollWidth,
  view_width: window.innerWidth,
  view_height: window.innerHeight,
  // tables whose box runs past the window's right edge: cut off (or widening the page)
  // rather than scrolling inside it
  tables_past_edge: Array.from(document.querySelectorAll('table'))
    .filter(t => t.getBoundingClientRect().right > window.innerWidth + 1).length,
  answer_box: (() => { const e = document.getElementById('answer');
                       if (!e) return null;
                       const r = e.getBoundingClientRect(); return [r.top, r.bottom]; })()
})"""
#: the reader's window: the issue's 1400 px wide screen (a laptop's usual height)
VIEWPORT = {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False}


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


async def _inspect(ws_url: str, page_url: str, timeout: float) -> dict:
    from tornado.websocket import websocket_connect

    conn = await websocket_connect(ws_url, max_message_size=256 * 1024 * 1024)
    pending: dict[int, asyncio.Future] = {}
    events: list[dict] = []
    loaded = asyncio.Event()
    counter = iter(range(1, 1_000_000))

    async def reader():
        while True:
            msg = await conn.read_message()
            if msg is None:
                return
            data = json.loads(msg)
            if "id" in data and data["id"] in pending:
                pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                events.append(data)
                if data["method"] == "Page.loadEventFired":
                    loaded.set()

    async def send(method: str, params: dict | None = None) -> dict:
        i = next(counter)
        fut = asyncio.get_running_loop().create_future()
        pending[i] = fut
        await conn.write_message(json.dumps({"id": i, "method": method, "params": params or {}}))
        return await asyncio.wait_for(fut, timeout)

    task = asyncio.create_task(reader())
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            await send(f"{domain}.enable")
        await send("Emulation.setDeviceMetricsOverride", VIEWPORT)
        await send("Page.navigate", {"url": page_url})
        await asyncio.wait_for(loaded.wait(), timeout)
        await asyncio.sleep(0.5)  # late console messages and image decodes
        res = await send("Runtime.evaluate", {"expression": SUMMARY_JS, "returnByValue": True})
        summary = json.loads(res["result"]["result"]["value"])
    finally:
        task.cancel()
        conn.close()

    errors, requests, failed = [], [], []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.exceptionThrown":
            errors.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                       for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
        elif m == "Network.requestWillBeSent":
            requests.append(p.get("request", {}).get("url", ""))
        elif m == "Network.loadingFailed":
            failed.append(p.get("errorText", ""))
        elif m == "Page.javascriptDialogOpening":
            errors.append("dialog: " + p.get("message", ""))
    summary.update(console_errors=errors, failed_loads=failed,
                   external_requests=[u for u in requests
                                      if not u.startswith(("file:", "data:", "about:", "blob:"))])
    return summary


def inspect(html_path: str | Path, browser: str | None = None, timeout: float = 60.0) -> dict:
    """Open ``html_path`` in headless Chromium; return the page summary and its errors."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium/Chrome on PATH")
    profile = Path(tempfile.mkdtemp(prefix="perflab-chromium-"))
    proc = subprocess.Popen(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", "--disable-background-networking",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.is_file() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{browser} did not start (exit {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        url = Path(html_path).resolve().as_uri()
        return asyncio.run(_inspect(pages[0]["webSocketDebuggerUrl"], url, timeout))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
