"""A small single-page docs app on disk, served by Python's static server (helpers.serve_directory).

Every page is the same shell (``<div id=app>`` and ``/app.js``); the script reads the route from
``location.pathname``, fetches the page's text from ``/api/<route>.json`` (same origin), adds the
navigation links itself and moves the URL with ``history.pushState`` (client-side routing). It
also tries a private address and another local port, which the renderer must refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

SHELL = """<!doctype html><html><head><title>{title}</title></head>
<body><div id="app"></div><noscript>Please enable JavaScript to view this site.</noscript>
<script src="/app.js"></script></body></html>"""

APP_JS = """
(async () => {
  const route = location.pathname.replace(/^\\/|\\/$/g, '') || 'home';
  const hostile = [%(hostile)s];
  for (const url of hostile) { fetch(url).catch(() => {}); }
  const page = await (await fetch('/api/' + route + '.json')).json();
  const app = document.getElementById('app');
  const nav = document.createElement('nav');
  for (const link of page.links) {
    const a = document.createElement('a'); a.href = link; a.textContent = link; nav.appendChild(a);
  }
  const main = document.createElement('main');
  const h1 = document.createElement('h1'); h1.textContent = page.title; main.appendChild(h1);
  for (const text of page.paragraphs) {
    const p = document.createElement('p'); p.textContent = text; main.appendChild(p);
  }
  // the URL changes before the content appears: a snapshot taken as soon as the text is there
  // (a loaded machine can take it between two statements) must already see the new URL
  history.pushState({}, '', location.pathname + '#rendered');
  app.appendChild(nav); app.appendChild(main);
})();
"""

LOOP_SHELL = """<!doctype html><html><head><title>loop</title></head>
<body><div id="app"></div><script>while (true) {}</script></body></html>"""


def page_text(route: str, n: int = 0) -> list[str]:
    return [f"The {route} chapter, paragraph {i}: rendered text {route}-{i} for the index." for i in range(3 + n % 2)]


def write_spa(
    root: Path, routes: list[str], hostile: tuple[str, ...] | list[str] = (), links: dict[str, list[str]] | None = None
) -> None:
    """``routes[0]`` is the home page (``/``); the others live at ``/<route>/``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.js").write_text(APP_JS % {"hostile": ", ".join(json.dumps(h) for h in hostile)})
    (root / "api").mkdir(exist_ok=True)
    (root / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")
    for number, route in enumerate(routes):
        folder = root if number == 0 else root / route
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text(SHELL.format(title=route))
        targets = (links or {}).get(route, [f"/{r}/" for r in routes[1:] if r != route])
        api = {"title": f"Chapter {route}", "paragraphs": page_text(route, number), "links": targets}
        (root / "api" / f"{'home' if number == 0 else route}.json").write_text(json.dumps(api))
