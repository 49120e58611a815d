"""Check report pages in a real browser: headless Chromium driven over the DevTools protocol.

For every HTML page: every `<img>` has loaded (`complete` and `naturalWidth > 0`), the page
logged no console error, threw no exception and failed to load no resource (Chromium logs a
missing image as a `Log.entryAdded` error), and a full-page screenshot at desktop width
(1280 CSS px) is saved beside the page as `<page>.screenshot.png`.

Chromium talks DevTools over a pipe (`--remote-debugging-pipe`: it reads commands on fd 3
and writes replies and events on fd 4, each JSON message ending in a NUL byte), so no port,
websocket library or network is involved. One browser checks all pages in turn.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import UserError

WIDTH = 1280
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    f"--window-size={WIDTH},2000",
)
IMAGES_JS = (
    "JSON.stringify(Array.from(document.images).map("
    "i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})))"
)
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@dataclass
class PageCheck:
    """What the browser saw on one page; `ok` when nothing is wrong."""

    page: Path
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.broken_images and not self.console_errors

    def problems(self) -> list[str]:
        return [f"image did not load: {src}" for src in self.broken_images] + [
            f"console error: {msg}" for msg in self.console_errors
        ]


def find_browser() -> str:
    """The Chromium executable on PATH; UserError naming how to install it."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise UserError("no Chromium on PATH: install it with scripts/ensure-chromium (Debian)")


class DevTools:
    """A headless Chromium and its DevTools pipe, attached to one page target."""

    def __init__(self, browser: str, profile: Path, timeout_s: float = 60.0):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:
            # Runs in the child: the protocol wants exactly fds 3 and 4. Copying both ends
            # above 10 first means neither can be overwritten by the other's dup2.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [browser, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.timeout_s = timeout_s
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise UserError(f"Chromium did not answer within {self.timeout_s:.0f} s")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise UserError(f"Chromium exited (code {self.proc.poll()}) during the check")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise UserError(f"Chromium refused {method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        """Until event `method` of the page has arrived (kept with the other events)."""
        deadline = time.monotonic() + self.timeout_s
        while not any(ev.get("method") == method for ev in self.events):
            self.events.append(self._read(deadline))

    def close(self) -> None:
        with contextlib.suppress(UserError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def _errors(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and failed loads among the page's events."""
    out = []
    for ev in events:
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.append(f"{entry.get('text', '')} {entry.get('url', '')}".strip())
    return out


def _check_one(tools: DevTools, page: Path) -> PageCheck:
    tools.events.clear()
    tools.call("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
    tools.wait_for("Page.loadEventFired")
    images = json.loads(
        tools.call("Runtime.evaluate", {"expression": IMAGES_JS, "returnByValue": True}, True)[
            "result"
        ]["value"]
    )
    height = tools.call("Page.getLayoutMetrics", session=True)["cssContentSize"]["height"]
    shot = tools.call(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": WIDTH, "height": max(1, height), "scale": 1},
        },
        session=True,
    )
    screenshot = page.with_name(f"{page.stem}.screenshot.png")
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    return PageCheck(
        page=page,
        images=len(images),
        broken_images=[i["src"] for i in images if not i["complete"] or i["width"] <= 0],
        console_errors=_errors(tools.events),
        screenshot=screenshot,
    )


def check_pages(pages: list[Path], browser: str | None = None) -> list[PageCheck]:
    """Open each page in one headless Chromium and report what it saw (see module doc)."""
    if not pages:
        return []
    with tempfile.TemporaryDirectory(prefix="repro-chromium-") as profile:
        tools = DevTools(browser or find_browser(), Path(profile))
        try:
            for domain in ("Page", "Runtime", "Log"):
                tools.call(f"{domain}.enable", session=True)
            tools.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
                session=True,
            )
            return [_check_one(tools, page) for page in pages]
        finally:
            tools.close()


def html_pages(root: Path) -> list[Path]:
    """Every .html file under `root` (a directory) or `root` itself (a file)."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise UserError(f"{root} is neither an HTML page nor a directory")
    pages = sorted(root.rglob("*.html"))
    if not pages:
        raise UserError(f"no .html pages under {root}: build them with `repro report all`")
    return pages


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="repro report check", description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?", default="reports", help="directory or page (reports)")
    args = p.parse_args(argv)
    checks = check_pages(html_pages(Path(args.path)))
    bad = 0
    for c in checks:
        status = "ok" if c.ok else "FAILED"
        print(f"{status}: {c.page} ({c.images} images; screenshot {c.screenshot})")
        for problem in c.problems():
            print(f"  {problem}")
        bad += not c.ok
    print(f"{len(checks) - bad} of {len(checks)} pages passed")
    return 1 if bad else 0
