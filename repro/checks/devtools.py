"""Headless Chromium driven over the DevTools protocol, on a pipe.

Chromium talks DevTools over a pipe (`--remote-debugging-pipe`: it reads commands on fd 3
and writes replies and events on fd 4, each JSON message ending in a NUL byte), so no port,
websocket library or network is involved. One browser, attached to one page target, serves
every page a check opens (`repro.checks.browser`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
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
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


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

    def evaluate(self, expression: str) -> Any:
        """The value of a page expression that returns JSON text, parsed."""
        params = {"expression": expression, "returnByValue": True}
        return json.loads(self.call("Runtime.evaluate", params, session=True)["result"]["value"])

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
