"""Check report pages in a real browser: headless Chromium at a 1,280 px window.

For every HTML page, after it has loaded (`repro.checks.devtools` drives the browser):
* no horizontal overflow: the page is no wider than the window (a table wider than the body
  must scroll inside its own box); the failure names the widest element and its section;
* every `<img>` has loaded (`complete` and `naturalWidth > 0`);
* every link to a local file or directory (a figure, a run directory) points at one that
  exists, and every link to a place on the page (`#id`) at an element with that id; links
  to the web are not followed (the check needs no network);
* the page logged no console error, threw no exception and failed to load no resource
  (Chromium logs a missing image as a `Log.entryAdded` error).
A full-page screenshot at 1,280 px is saved beside each page as `<page>.screenshot.png`, or
under `--screenshots DIR` at the page's path relative to the checked directory.
"""

from __future__ import annotations

import base64
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from repro.checks.devtools import WIDTH, DevTools, find_browser
from repro.errors import CommandParser, UserError
from repro.storage import atomic_write, check_creatable

__all__ = ["PageCheck", "check_pages", "find_browser", "html_pages", "main"]

IMAGES_JS = (
    "JSON.stringify(Array.from(document.images).map("
    "i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})))"
)
# Links as written and as resolved; a `#id` link is checked against the page's ids here.
LINKS_JS = """JSON.stringify(Array.from(document.querySelectorAll('a[href]')).map(a => {
  const raw = a.getAttribute('href');
  const here = raw.startsWith('#');
  const id = here ? decodeURIComponent(raw.slice(1)) : '';
  return {raw: raw, url: a.href, here: here, found: !here || !!document.getElementById(id)};
}))"""
# The page's width against the window's; when wider, the first element in document order
# that sticks out and is not inside a box that clips or scrolls it, and its section.
OVERFLOW_JS = """(() => {
  const root = document.documentElement, width = root.clientWidth, wide = root.scrollWidth;
  if (wide <= width) return JSON.stringify({width, wide, what: ''});
  const boxed = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    return false;
  };
  // an element's right edge, or its content's when that spills out of it
  const right = e => Math.max(e.getBoundingClientRect().right,
                              e.getBoundingClientRect().left + e.scrollWidth);
  const el = Array.from(document.body.querySelectorAll('*'))
    .find(e => right(e) > width + 0.5 && !boxed(e));
  let what = '';
  if (el) {
    const heads = Array.from(document.querySelectorAll('h1, h2'))
      .filter(h => h.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING);
    const under = heads.length ? ` under '${heads[heads.length - 1].textContent}'` : '';
    what = `<${el.tagName.toLowerCase()}>${under}, right edge at ${Math.round(right(el))} px`;
  }
  return JSON.stringify({width, wide, what});
})()"""
SHOWN = 5  # problems printed per page before "and N more"


@dataclass
class PageCheck:
    """What the browser saw on one page; `ok` when nothing is wrong."""

    page: Path
    images: int = 0
    links: int = 0
    broken_images: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    overflow: str = ""
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        return (
            ([f"wider than its window: {self.overflow}"] if self.overflow else [])
            + [f"image did not load: {src}" for src in self.broken_images]
            + [f"broken link: {href}" for href in self.broken_links]
            + [f"console error: {msg}" for msg in self.console_errors]
        )

    def line(self) -> str:
        """The page's one line of the check's output."""
        counts = f"{self.images} images, {self.links} links; screenshot {self.screenshot}"
        if self.ok:
            return f"ok: {self.page} ({counts})"
        problems = self.problems()
        more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        return f"FAILED: {self.page}: {'; '.join(problems[:SHOWN])}{more} ({counts})"


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


def broken_links(links: list[dict]) -> list[str]:
    """The links (as written, each once) that lead nowhere: a `#id` the page lacks, or a
    local file or directory that does not exist. Web links are not followed."""
    broken = []
    for link in links:
        url = urlparse(link["url"])
        if link["here"]:
            missing = not link["found"]
        elif url.scheme == "file":
            missing = not Path(unquote(url.path)).exists()
        else:
            missing = False
        if missing and link["raw"] not in broken:
            broken.append(link["raw"])
    return broken


def _screenshot(tools: DevTools, path: Path) -> Path:
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
    png = base64.b64decode(shot["data"])
    atomic_write(path, lambda f: f.write(png), "--screenshots")
    return path


def _check_one(tools: DevTools, page: Path, screenshot: Path) -> PageCheck:
    tools.events.clear()
    tools.call("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
    tools.wait_for("Page.loadEventFired")
    images = tools.evaluate(IMAGES_JS)
    links = tools.evaluate(LINKS_JS)
    width = tools.evaluate(OVERFLOW_JS)
    overflow = ""
    if width["wide"] > width["width"]:
        overflow = (
            f"{width['wide']} px of content in a {WIDTH} px window ({width['width']} px "
            "inside its scrollbar)"
        )
        overflow += f"; sticking out: {width['what']}" if width["what"] else ""
    return PageCheck(
        page=page,
        images=len(images),
        links=len(links),
        broken_images=[i["src"] for i in images if not i["complete"] or i["width"] <= 0],
        broken_links=broken_links(links),
        console_errors=_errors(tools.events),
        overflow=overflow,
        screenshot=_screenshot(tools, screenshot),
    )


def screenshot_path(page: Path, root: Path | None, shots: Path | None) -> Path:
    """Beside the page, or under `shots` at the page's path relative to `root`."""
    name = f"{page.stem}.screenshot.png"
    if shots is None:
        return page.with_name(name)
    base = root if root is not None and root.is_dir() else page.parent
    return shots / page.parent.resolve().relative_to(base.resolve()) / name


def check_pages(
    pages: list[Path],
    browser: str | None = None,
    *,
    root: Path | None = None,
    screenshots: Path | None = None,
) -> list[PageCheck]:
    """Open each page in one headless Chromium at a 1,280 px window and report what it saw
    (see module doc); screenshots go beside each page, or under `screenshots` (the pages'
    paths relative to `root`)."""
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
            return [
                _check_one(tools, page, screenshot_path(page, root, screenshots)) for page in pages
            ]
        finally:
            tools.close()


def html_pages(root: Path) -> list[Path]:
    """Every .html file under `root` (a directory) or `root` itself (a file)."""
    if root.is_file():
        return [root]
    if not root.exists():
        raise UserError(
            f"{root} does not exist: build the pages with `repro report all`, or name them"
        )
    if not root.is_dir():
        raise UserError(f"{root} is neither an HTML page nor a directory")
    pages = sorted(root.rglob("*.html"))
    if not pages:
        raise UserError(f"no .html pages under {root}: build them with `repro report all`")
    return pages


def main(argv: list[str]) -> int:
    p = CommandParser(prog="repro report check", description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?", default="reports", help="directory or page (reports)")
    p.add_argument(
        "--screenshots",
        metavar="DIR",
        help="write the screenshots under DIR (default: beside each page)",
    )
    args = p.parse_args(argv)
    root = Path(args.path)
    shots = Path(args.screenshots) if args.screenshots else None
    pages = html_pages(root)
    if shots is not None:  # before the browser starts, not at the first page's screenshot
        check_creatable(shots, "--screenshots")
    checks = check_pages(pages, root=root, screenshots=shots)
    for check in checks:
        print(check.line())
    bad = sum(not c.ok for c in checks)
    print(f"{len(checks) - bad} of {len(checks)} pages passed")
    return 1 if bad else 0
