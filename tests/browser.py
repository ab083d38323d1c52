"""Open Dask's HTML (performance reports) in real headless Chromium and read what rendered.

``render_performance_report(path)`` loads the file in Debian's ``/usr/bin/chromium`` through
Playwright (no browser download), lets BokehJS build the document, clicks the "Task Stream"
tab and returns a :class:`Rendered`: the tab titles found in the rendered DOM (shadow roots
included), the task-stream data source's row count and the number of coloured pixels inside
the task-stream plot's frame in a screenshot (the task rectangles; axes, grid and background
are grey or white). The checks belong to the caller (see ``assert_task_stream``).

Every network request is refused: the reports gpuscale writes inline BokehJS and must render
offline. ``serve_cdn=True`` is for reports written with Bokeh's default CDN resources (Dask's
own ``performance_report()``): then every
``https://cdn.bokeh.org/bokeh/release/<bundle>-<version>.js`` request is answered from the
installed bokeh package's own copy of that bundle and every other request is refused, so the
test still runs offline and what renders is exactly what the file says.

``chromium()`` returns the browser path, or skips the test when it is absent, unless the
env var ``GPUSCALE_REQUIRE_BROWSER`` is set (CI sets it): then a missing browser fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import shutil

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CDN = re.compile(r"^https://cdn\.bokeh\.org/bokeh/release/(bokeh(?:-[a-z]+)?)-[0-9][^/]*?(\.min)?\.js$")

# Find the task-stream figure's view (by its data source's columns, not by position) and
# report its rows, its frame on the page and the tab titles in the rendered DOM.
_JS_TASK_STREAM = """() => {
  function* walk(v) {
    yield v;
    for (const c of (v.child_views ?? [])) yield* walk(c);
    for (const c of (v.renderer_views?.values?.() ?? [])) yield* walk(c);
  }
  const views = [];
  for (const root of Object.values(Bokeh.index)) {
    if (root.owner && typeof root.owner.query === "function") views.push(...root.owner.query(() => true));
    else views.push(...walk(root));
  }
  const out = {plots: [], stream: null};
  for (const v of new Set(views)) {
    if (!v.frame || !v.model.renderers) continue;
    const sources = v.model.renderers.filter(r => r.data_source).map(r => r.data_source);
    const title = v.model.title ? v.model.title.text : null;
    out.plots.push(title);
    const ts = sources.find(
        s => ["worker_thread", "duration", "start", "key"].every(k => s.columns().includes(k)));
    if (!ts) continue;
    const canvas = v.canvas_view.el.getBoundingClientRect();
    const f = v.frame.bbox;
    out.stream = {title, rows: ts.get_length(), names: [...new Set(ts.data.name ?? [])],
                  clip: {x: canvas.x + f.x, y: canvas.y + f.y, width: f.width, height: f.height}};
  }
  return out;
}"""


def chromium() -> str:
    """Path of the headless browser; skip without one (fail if GPUSCALE_REQUIRE_BROWSER is set)."""
    for p in (os.environ.get("GPUSCALE_CHROMIUM"), *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    why = "no Chromium at /usr/bin/chromium (Debian/Ubuntu: apt-get install chromium)"
    if os.environ.get("GPUSCALE_REQUIRE_BROWSER"):
        pytest.fail(f"{why}; GPUSCALE_REQUIRE_BROWSER is set, so the browser test must run")
    pytest.skip(why)


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("GPUSCALE_REQUIRE_BROWSER"):
            pytest.fail("playwright is not installed (it is in the test extra: pip install '.[test]')")
        pytest.skip("playwright is not installed (pip install '.[test]')")
    return sync_playwright


@dataclasses.dataclass
class Rendered:
    tabs: list[str]  # tab titles visible in the rendered DOM
    plots: list[str | None]  # titles of every plot BokehJS built
    task_stream_title: str | None
    task_stream_rows: int  # rows in the task-stream ColumnDataSource
    task_groups: list[str]  # task-group names in it
    frame_pixels: int  # pixels inside the task-stream frame
    colored_pixels: int  # of those, coloured (task rectangles)
    page_errors: list[str]
    screenshot: pathlib.Path | None


def _colored(png: bytes) -> tuple[int, int]:
    import io

    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    spread = a.max(axis=2) - a.min(axis=2)  # 0 for white / grey / black
    return int(a.shape[0] * a.shape[1]), int((spread > 60).sum())


@contextlib.contextmanager
def _offline_page(exe: str, route, errors: list[str]):
    """A page of headless Chromium (``exe``) whose every http(s) request goes to ``route`` and
    whose script errors land in ``errors``; the browser closes with the block."""
    sync_playwright = _playwright()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=exe,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.route(re.compile(r"^https?://"), route)
            yield page
        finally:
            browser.close()


def render_performance_report(
    path: str | os.PathLike,
    *,
    screenshot: str | os.PathLike | None = None,
    timeout_s: float = 30,
    serve_cdn: bool = False,
) -> Rendered:
    """Render a ``distributed.performance_report`` file in headless Chromium and read it back
    (network blocked; ``serve_cdn``: Bokeh's CDN answered from the installed bokeh)."""
    from bokeh.util.paths import bokehjs_path

    exe = chromium()
    path = pathlib.Path(path).resolve()
    js_dir = pathlib.Path(bokehjs_path()) / "js"
    errors: list[str] = []

    def route(r):
        m = CDN.match(r.request.url) if serve_cdn else None
        local = js_dir / f"{m.group(1)}{m.group(2) or ''}.js" if m else None
        if local is not None and local.is_file():
            r.fulfill(path=str(local), content_type="application/javascript")
        else:
            errors.append(f"blocked request {r.request.url}")
            r.abort()

    with _offline_page(exe, route, errors) as page:
        page.goto(path.as_uri())
        page.wait_for_function(
            "() => window.Bokeh && Bokeh.documents.length > 0 && Object.keys(Bokeh.index).length > 0"
            " && (Bokeh.documents[0].is_idle ?? true)",
            timeout=timeout_s * 1000,
        )
        tab = page.get_by_text("Task Stream", exact=True)
        tabs = [
            t
            for t in ("Summary", "Task Stream", "System", "Worker Profile (compute)", "Bandwidth (Workers)")
            if page.get_by_text(t, exact=True).count()
        ]
        if tab.count():
            tab.first.click()
        page.wait_for_timeout(300)  # one layout + paint after the tab switch
        info = page.evaluate(_JS_TASK_STREAM)
        stream = info["stream"] or {}
        frame = colored = 0
        if stream and stream["clip"]["width"] > 0 and stream["clip"]["height"] > 0:
            frame, colored = _colored(page.screenshot(clip=stream["clip"]))
        shot = None
        if screenshot is not None:
            shot = pathlib.Path(screenshot)
            page.screenshot(path=str(shot))
    return Rendered(
        tabs=tabs,
        plots=info["plots"],
        task_stream_title=stream.get("title"),
        task_stream_rows=int(stream.get("rows") or 0),
        task_groups=stream.get("names", []),
        frame_pixels=frame,
        colored_pixels=colored,
        page_errors=errors,
        screenshot=shot,
    )


def assert_task_stream(r: Rendered, *, min_rows: int = 1, groups: tuple[str, ...] = ()) -> None:
    """The report rendered without errors and its task stream shows tasks."""
    assert not r.page_errors, r.page_errors
    assert "Task Stream" in r.tabs and "Summary" in r.tabs, r.tabs
    assert r.task_stream_title == "Task Stream", r.plots
    assert r.task_stream_rows >= min_rows, r
    for g in groups:
        assert any(g in n for n in r.task_groups), (g, r.task_groups)
    # drawn, not just present in the data: coloured task rectangles fill part of the frame
    assert r.frame_pixels > 10_000, r
    assert r.colored_pixels > 0.02 * r.frame_pixels, r


@dataclasses.dataclass
class Page:
    images: list[dict]  # every <img>: src, alt, natural width / height, complete
    text: str  # the body's rendered text
    page_errors: list[str]
    svgs: list[dict] = dataclasses.field(default_factory=list)
    """every inline <svg>: id, width / height on the page, its <rect> count, and pixels /
    coloured pixels of its screenshot (drawn, not just in the DOM)"""


def render_page(path: str | os.PathLike, *, timeout_s: float = 30) -> Page:
    """Load a local HTML file in headless Chromium (every http(s) request refused) and read
    back its images (as the browser decoded them) and its text."""
    exe = chromium()
    path = pathlib.Path(path).resolve()
    errors: list[str] = []

    def refuse(r):
        errors.append(f"blocked request {r.request.url}")
        r.abort()

    with _offline_page(exe, refuse, errors) as page:
        page.goto(path.as_uri(), wait_until="load", timeout=timeout_s * 1000)
        images = page.evaluate(
            "() => [...document.images].map(i => ({src: i.getAttribute('src'), "
            "alt: i.alt, width: i.naturalWidth, height: i.naturalHeight, "
            "complete: i.complete}))"
        )
        text = page.evaluate("() => document.body.innerText")
        svgs = page.evaluate(
            "() => [...document.querySelectorAll('svg')].map(s => {const b = "
            "s.getBoundingClientRect(); return {id: s.id, x: b.x, y: b.y, width: b.width, "
            "height: b.height, rects: s.querySelectorAll('rect').length, "
            "texts: [...s.querySelectorAll('text')].map(t => t.textContent)};})"
        )
        for svg in svgs:
            svg["pixels"] = svg["colored_pixels"] = 0
            if svg["width"] > 0 and svg["height"] > 0:
                clip = {k: svg[k] for k in ("x", "y", "width", "height")}
                svg["pixels"], svg["colored_pixels"] = _colored(page.screenshot(clip=clip, full_page=True))
    return Page(images=images, text=text, page_errors=errors, svgs=svgs)
