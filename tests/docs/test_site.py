"""The documentation site as a reader gets it: built (``make docs``), served over loopback, and loaded
page by page in headless Chromium.

* The site builds from scratch without a warning (``make docs``'s command, into a new folder).
* The navigation shows exactly the user guide's sections, then Internals, and nothing else (no hidden
  page, no second heading of a page).
* Every internal link of every page resolves: the file exists, and so does the anchor it points to
  (checked on the built HTML with the standard library's parser, so this runs without a browser).
* Every page links to the repository and to its issue tracker (pyproject.toml's project.urls).
* Every page renders in the browser, in a desktop window and at a phone's width: it has its title and a body, the end of its text is on the page
  (nothing is cut off at the bottom), nothing is wider than the window or clipped at the sides, no
  table or code block runs out of the text column without a scrollbar of its own, and no script fails.
* Names stay whole and code keeps its lines: no word of an inline code span (an option name, a path, a
  command) is split across two lines, and no code block wraps a line instead of scrolling.
* In a desktop window (1280 px), the page's outline ("On this page") is on the screen beside the text,
  at the top of the page and at its end.

Chromium is driven through its DevTools protocol (a WebSocket, with aiohttp), one browser for all
pages. Set ``JOBWATCH_DOCS_SCREENSHOTS=DIR`` to keep a screenshot of each page.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag, urlsplit

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# What the sidebar must show, in this order: (caption, [page titles]).
NAVIGATION = [
    (
        "User guide",
        [
            "Installation",
            "Connections",
            "Operators",
            "Executor",
            "Deferrable trigger",
            "Configuration reference",
            "CLI",
            "Metrics",
            "Testing your DAGs",
            "Deploying",
            "Migration from cncf.kubernetes",
            "Troubleshooting",
            "Security",
            "Changelog",
        ],
    ),
    (
        "Internals",
        [
            "How it is built and tested",
            "Architecture",
            "The executor's design",
            "The deferrable wait's design",
            "Benchmarks",
            "The sandbox's design",
            "Failure-modes catalogue",
        ],
    ),
]

WINDOW = (1280, 900)
# Generous: the machine is shared; a page of this site loads in well under a second.
PAGE_LOAD_TIMEOUT = 30.0
BROWSER_START_TIMEOUT = 60.0

pytestmark = pytest.mark.skipif(not DOCS.is_dir(), reason="needs the source tree's docs/")


# -- the built site ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from scratch with `make docs`'s command (warnings are errors), into a new folder:
    an incremental build keeps the sidebar of pages it did not rebuild, which would hide (or invent)
    a navigation problem."""
    out = tmp_path_factory.mktemp("site") / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the docs build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def _pages(site: Path) -> list[Path]:
    """Every page a reader can reach: not Sphinx's own folders (_static, _sources, _modules), but the
    generated configuration reference."""
    return sorted(
        p
        for p in site.rglob("*.html")
        if not any(part.startswith("_") and part != "_generated" for part in p.relative_to(site).parts)
    )


class _Page(HTMLParser):
    """What the checks need from a built page: its links, its ids, its title, the sidebar's entries
    and the text of its article."""

    VOID = frozenset(
        ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr")
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.title = ""
        self.nav: list[tuple[str, str]] = []  # ("caption" | "l1" | "l2" ..., text)
        self.article_text: list[str] = []
        self._open: list[tuple[str, str]] = []  # (tag, what it is to the checks)

    def _inside(self, what: str) -> bool:
        return any(w == what for _, w in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "link", "img", "script"):
                self.links.append(a[key])
        classes = a.get("class", "").split()
        what = ""
        if tag == "title" and not self.title:
            what = "title"  # the page's, in <head>, not an SVG icon's
        elif "sidebar-tree" in classes:
            what = "nav"
        elif tag == "article" and a.get("role") == "main":
            what = "article"
        elif self._inside("nav") and tag == "p" and "caption" in classes:
            what = "caption"
            self.nav.append(("caption", ""))
        elif self._inside("nav") and tag == "li":
            level = next((c.removeprefix("toctree-") for c in classes if c.startswith("toctree-l")), "")
            if level:
                self.nav.append((level, ""))
        elif self._inside("nav") and tag == "a" and self.nav and self.nav[-1][0] != "caption":
            what = "entry"  # the entry's text is its link's (its toggle holds hidden words)
        if tag not in self.VOID:
            self._open.append((tag, what))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        if self._inside("title"):
            self.title += data
        if self._inside("article"):
            self.article_text.append(data)
        if self._inside("caption") or self._inside("entry"):
            kind, text = self.nav[-1]
            self.nav[-1] = (kind, _squash(text + " " + data))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_navigation_shows_exactly_the_sections(site: Path) -> None:
    """The same sidebar on every page: the user guide's sections, then Internals, one level deep."""
    expected: list[tuple[str, str]] = []
    for caption, titles in NAVIGATION:
        expected += [("caption", caption)] + [("l1", t) for t in titles]
    for path in _pages(site):
        nav = _parse(path).nav
        assert nav == expected, f"{path.relative_to(site)}: the sidebar shows {nav}"


def test_every_internal_link_resolves(site: Path) -> None:
    """Every relative href/src of every page names a file of the site, and every #anchor an id in it."""
    pages = [p for p in site.rglob("*.html") if "_static" not in p.parts]
    ids: dict[Path, set[str]] = {}

    def ids_of(target: Path) -> set[str]:
        if target not in ids:
            ids[target] = _parse(target).ids
        return ids[target]

    broken: list[str] = []
    checked = 0
    for page in pages:
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external: not this site's to check (and no network here)
            url, fragment = urldefrag(link)
            path = unquote(urlsplit(url).path)
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            where = f"{page.relative_to(site)} -> {link}"
            if not target.is_file() or not target.is_relative_to(site.resolve()):
                broken.append(f"{where}: no such file")
            elif fragment and target.suffix == ".html" and unquote(fragment) not in ids_of(target):
                broken.append(f"{where}: no id {fragment!r} in {target.relative_to(site.resolve())}")
    assert checked > 500, f"only {checked} links found: is the site built?"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_page_links_to_the_repository_and_its_issue_tracker(site: Path) -> None:
    """A reader who wants the code or has a problem to report finds both from any page: the links are
    pyproject.toml's project.urls, as the package's page on PyPI shows them."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    wanted = {"the repository": urls["Source"], "the issue tracker": urls["Issues"]}
    missing = [
        f"{path.relative_to(site)}: no link to {what} ({url})"
        for path in _pages(site)
        for what, url in wanted.items()
        if url not in _parse(path).links
    ]
    assert not missing, "\n".join(missing)


# -- in the browser ------------------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a browser treats file:// pages differently)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _QuietHandler(*a, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _DevTools:
    """Just enough of the Chrome DevTools protocol: commands with ids, and the events in between."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        async with asyncio.timeout(PAGE_LOAD_TIMEOUT):
            while True:
                message = json.loads((await self.ws.receive()).data)
                if message.get("id") == my_id:
                    if "error" in message:
                        raise AssertionError(f"{method}: {message['error']}")
                    return message.get("result", {})
                self.events.append(message)

    async def wait_event(self, method: str) -> dict[str, Any]:
        async with asyncio.timeout(PAGE_LOAD_TIMEOUT):
            while True:
                for i, event in enumerate(self.events):
                    if event.get("method") == method:
                        return self.events.pop(i)
                self.events.append(json.loads((await self.ws.receive()).data))


async def _devtools_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    """Chromium writes the port it chose (--remote-debugging-port=0) to DevToolsActivePort."""
    deadline = time.monotonic() + BROWSER_START_TIMEOUT
    port_file = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode} before it listened")
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().split()[0])
        await asyncio.sleep(0.1)
    raise AssertionError(f"chromium did not write {port_file} within {BROWSER_START_TIMEOUT} s")


def _start_chromium(binary: str, profile: Path) -> subprocess.Popen[bytes]:
    """Headless chromium with its DevTools protocol on a loopback port of its choosing."""
    return subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its helper processes (renderer, crashpad) in a group of their own
    )


@pytest.fixture
async def browser() -> AsyncIterator[_DevTools]:
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    # The profile is removed once chromium and all its helpers have exited (they write to it until then).
    with tempfile.TemporaryDirectory(prefix="jobwatch-docs-chromium-", ignore_cleanup_errors=True) as profile:
        proc = _start_chromium(binary, Path(profile))
        try:
            port = await _devtools_port(Path(profile), proc)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json()
                page = next(t for t in targets if t.get("type") == "page")
                async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    devtools = _DevTools(ws)
                    await devtools.call("Page.enable")
                    await devtools.call("Runtime.enable")
                    yield devtools
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the chromium this test started, and its helper processes: its own process group."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)  # anyone left in the group?
            except ProcessLookupError:
                return
            time.sleep(0.05)


# Runs in the page once it has loaded: what a reader would see.
_MEASURE = r"""
(async () => {
  await document.fonts.ready;
  const article = document.querySelector('article[role="main"]');
  const h1 = article && article.querySelector('h1');
  const footer = document.querySelector('footer');
  const scroller = document.scrollingElement;
  // Text that is laid out but clipped: the article, what it holds, and what holds it, where an
  // overflow that does not scroll hides part of the content (at the sides or at the bottom).
  const clipped = [];
  const hides = (v) => v === 'hidden' || v === 'clip';
  const boxes = article ? [...article.querySelectorAll('*'), article] : [];
  for (let el = article && article.parentElement; el; el = el.parentElement) boxes.push(el);
  for (const el of boxes) {
    const style = getComputedStyle(el);
    if ((hides(style.overflowX) && el.scrollWidth > el.clientWidth + 1) ||
        (hides(style.overflowY) && el.scrollHeight > el.clientHeight + 1)) {
      clipped.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : ''));
    }
  }
  // A table or code block wider than the text column must scroll on its own (a scrollbar), not run
  // out of the column under the table of contents or off the window.
  const overflowing = [];
  const scrolls = (v) => v === 'auto' || v === 'scroll';
  const column = article ? article.getBoundingClientRect() : null;
  for (const el of article ? article.querySelectorAll('table, pre') : []) {
    let box = el, scroller_ = null;
    for (; box && box !== article; box = box.parentElement) {
      if (scrolls(getComputedStyle(box).overflowX)) { scroller_ = box; break; }
    }
    // A scrolling wrapper may reach into the column's margin by its own padding (the theme's
    // table wrapper is 100 % wide plus padding); what it holds scrolls inside it.
    const box_ = scroller_ || el;
    const style_ = getComputedStyle(box_);
    const slack = scroller_ ? parseFloat(style_.paddingLeft) + parseFloat(style_.paddingRight) : 0;
    if (box_.getBoundingClientRect().right > column.right + slack + 1) {
      overflowing.push(el.tagName.toLowerCase() + ': ' + (el.innerText || '').trim().slice(0, 40));
    }
  }
  // The distinct lines a set of client rectangles lies on: rectangles of one line share their top
  // (to a pixel or so), and lines are a line-height apart.
  const lineCount = (rects, lineHeight) => {
    const tops = rects.filter((r) => r.width > 0).map((r) => r.top).sort((a, b) => a - b);
    let lines = 0, last = -Infinity;
    for (const top of tops) { if (top - last > lineHeight / 2) { lines++; last = top; } }
    return lines;
  };
  const textNodes = (el) => {
    const nodes = [], walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
    return nodes;
  };
  // Identifiers and commands split across two lines: a word of an inline code span (a run without
  // white space: an option name, a path, a command's argument; a comma-separated list is several words)
  // whose letters lie on two lines. A reader copies and searches for these names; a line may break
  // only between their words.
  const split = [];
  for (const code of article ? article.querySelectorAll('code') : []) {
    if (code.closest('pre')) continue;
    const lineHeight = parseFloat(getComputedStyle(code).fontSize);
    for (const node of textNodes(code)) {
      for (const word of node.data.matchAll(/[^\s,]+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        if (lineCount([...range.getClientRects()], lineHeight) > 1) split.push(word[0]);
      }
    }
  }
  // Code blocks that wrap their long lines instead of scrolling: more lines on the screen than the
  // block has. A wrapped line's continuation starts at column 0, so Python's and YAML's indentation
  // reads wrong.
  const wrapped = [];
  for (const pre of article ? article.querySelectorAll('pre') : []) {
    const lineHeight = parseFloat(getComputedStyle(pre).lineHeight) || parseFloat(getComputedStyle(pre).fontSize);
    const rects = [];
    for (const node of textNodes(pre)) {
      if (!/\S/.test(node.data)) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      rects.push(...range.getClientRects());
    }
    const lines = pre.textContent.split('\n').filter((line) => /\S/.test(line)).length;
    const shown = lineCount(rects, lineHeight);
    if (shown > lines) {
      wrapped.push(lines + ' lines shown on ' + shown + ': ' + pre.textContent.trim().slice(0, 40));
    }
  }
  // The page's outline ("On this page"), where the page has one: on the screen beside the text, and
  // still there once the reader has scrolled to the end of a long page.
  const outline = document.querySelector('.toc-drawer');
  const onScreen = (el) => {
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 1 &&
           r.top < window.innerHeight && r.bottom > 0 && style.visibility !== 'hidden';
  };
  const outlineLinks = document.querySelectorAll('.toc-tree a').length;
  const outlineAtTop = !!outline && onScreen(outline.querySelector('.toc-tree') || outline);
  window.scrollTo(0, scroller.scrollHeight);
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  const outlineAtEnd = !!outline && onScreen(outline.querySelector('.toc-tree') || outline);
  window.scrollTo(0, 0);
  const articleRect = article ? article.getBoundingClientRect() : null;
  return JSON.stringify({
    title: document.title,
    h1: h1 ? h1.textContent : null,
    text: article ? article.innerText : '',
    articleBottom: articleRect ? articleRect.bottom + scroller.scrollTop : 0,
    articleHeight: articleRect ? articleRect.height : 0,
    footerTop: footer ? footer.getBoundingClientRect().top + scroller.scrollTop : null,
    scrollHeight: scroller.scrollHeight,
    scrollWidth: scroller.scrollWidth,
    innerWidth: window.innerWidth,
    clipped: clipped,
    overflowing: overflowing,
    split: split,
    wrapped: wrapped,
    outlineLinks: outlineLinks,
    outlineAtTop: outlineAtTop,
    outlineAtEnd: outlineAtEnd,
  });
})()
"""


def _letters(text: str) -> str:
    """Text without white space, header-link marks or case: the browser lays out what the HTML source
    splits into text nodes with spaces and line breaks of its own, and the theme's CSS upper-cases
    some labels."""
    return re.sub(r"[\s¶#]+", "", text).casefold()


@pytest.mark.parametrize("window", [(*WINDOW, False), (390, 844, True)], ids=["desktop", "phone"])
async def test_every_page_renders_whole_in_chromium(
    site: Path, served: str, browser: _DevTools, window: tuple[int, int, bool]
) -> None:
    width, height, mobile = window
    await browser.call(
        "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=mobile
    )
    shots = os.environ.get("JOBWATCH_DOCS_SCREENSHOTS")
    problems: list[str] = []
    pages = _pages(site)
    assert len(pages) >= 20, f"only {len(pages)} pages built"
    for path in pages:
        relative = path.relative_to(site).as_posix()
        static = _parse(path)
        browser.events.clear()
        await browser.call("Page.navigate", url=served + relative)
        await browser.wait_event("Page.loadEventFired")
        result = await browser.call(
            "Runtime.evaluate", expression=_MEASURE, awaitPromise=True, returnByValue=True
        )
        seen = json.loads(result["result"]["value"])
        errors = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]

        def problem(what: str, relative: str = relative) -> None:
            problems.append(f"{relative}: {what}")

        if seen["title"] != _squash(static.title) or not seen["title"]:
            problem(f"title {seen['title']!r}, the page says {static.title!r}")
        if relative == "search.html":
            # The search form: its results (and so its text) appear only once a reader searches.
            if errors:
                problem(f"script errors: {[e['params']['exceptionDetails'].get('text') for e in errors]}")
            continue
        if not (seen["h1"] or "").strip() and relative != "genindex.html":
            problem("no heading")
        if len(seen["text"].strip()) < 40 or seen["articleHeight"] < 50:
            problem(f"no body ({len(seen['text'])} characters, {seen['articleHeight']} px)")
        end = _letters("".join(static.article_text))[-60:]
        if not _letters(seen["text"]).endswith(end):
            problem(f"cut off: the end of its text ({end!r}) is not the end of the rendered page")
        if seen["footerTop"] is None or seen["footerTop"] + 1 < seen["articleBottom"]:
            problem("the footer is missing or overlaps the text")
        if seen["scrollHeight"] + 1 < seen["articleBottom"]:
            problem(f"the page ends at {seen['scrollHeight']} px, its text at {seen['articleBottom']} px")
        if seen["scrollWidth"] > seen["innerWidth"] + 1:
            problem(f"{seen['scrollWidth']} px wide in a {seen['innerWidth']} px window: cut off at the side")
        if seen["overflowing"]:
            problem(f"wider than the text column with no scrollbar: {seen['overflowing'][:5]}")
        if seen["split"]:
            problem(f"{len(seen['split'])} identifiers split across lines: {seen['split'][:8]}")
        if seen["wrapped"]:
            problem(f"code blocks wrap instead of scrolling: {seen['wrapped'][:5]}")
        if not mobile and seen["outlineLinks"] > 1 and not (seen["outlineAtTop"] and seen["outlineAtEnd"]):
            where = "at the end of the page" if seen["outlineAtTop"] else "beside the text"
            problem(f"the page's outline ({seen['outlineLinks']} entries) is not on the screen {where}")
        if seen["clipped"]:
            problem(f"content clipped (cut off) in {seen['clipped'][:5]}")
        if errors:
            problem(f"script errors: {[e['params']['exceptionDetails'].get('text') for e in errors]}")
        if shots:
            shot = await browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)
            name = relative.replace("/", "__").removesuffix(".html")
            target = Path(shots) / f"{name}-{width}px.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(shot["data"]))
    assert not problems, "\n".join(problems)
