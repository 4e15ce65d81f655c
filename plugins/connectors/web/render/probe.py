"""The renderer's own scripts in the page, kept where the page's scripts cannot reach them.

A page may replace any global its own world has (``MutationObserver``, ``JSON``, ``Array``, the
``outerHTML`` getter) and may throw from them whatever message it likes, so nothing of the
renderer runs in the page's world. Through the page's DevTools session (Playwright's
``CDPSession``, Chromium only) the script below is registered with
``Page.addScriptToEvaluateOnNewDocument`` in an *isolated world* (its own globals over the same
DOM, like an extension's content script), and it runs when the document is created, before any
script of the page. It

- counts DOM mutations (the settle test of ``renderer.py``);
- keeps a lower bound of the serialised DOM's length (tag names, attributes, text) up to date
  from the mutation records, and when it passes the cap empties the document and stops loading,
  in the microtask right after the task that grew it, so a page that builds 100 MiB of text is
  not laid out (layout of that text took the renderer to 4.7 GB and crashed it);
- serialises the DOM at the end (links made absolute first) and hands it back only when its
  length is under the cap: nothing larger is ever transferred to the driver and this process.

The cap is counted in UTF-16 code units, never more than the UTF-8 bytes of the same text: the
renderer checks the encoded bytes again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

__all__ = ["PageProbe", "ProbeError", "Snapshot"]

_WORLD = "tributary_renderer"
_INIT_JS = """(() => {
  if (window !== window.top) return;  // the main frame's document is the one serialised
  const cap = %(cap)d;
  const state = {mutations: 0, size: 0, growth: 0, tooLarge: 0};
  // A lower bound of the serialised length of the nodes under `root` (stops past `limit`);
  // template contents are serialised too, so they are walked (iteratively: no deep recursion).
  const lowerBound = (root, limit) => {
    let total = 0;
    const roots = [root];
    while (roots.length && total <= limit) {
      const start = roots.pop();
      const walker = document.createTreeWalker(start, 0x1 | 0x4 | 0x80);  // elements, text, comments
      for (let node = start; node && total <= limit; node = walker.nextNode()) {
        if (node.nodeType === 1) {
          total += node.localName.length + 2;
          for (const attr of node.attributes) total += attr.name.length + attr.value.length + 4;
          if (node.localName === 'template' && node.content) roots.push(node.content);
        } else if (node.nodeType === 3 || node.nodeType === 8) {
          total += node.data.length;
        }
      }
    }
    return total;
  };
  const neutralize = () => {
    window.stop();
    if (document.documentElement) document.documentElement.remove();
  };
  const grown = (record) => {
    if (record.type === 'childList') {
      let added = 0;
      for (const node of record.addedNodes) added += lowerBound(node, cap + 1);
      return added;
    }
    if (record.type === 'characterData') return record.target.data.length;
    return record.attributeName.length + (record.target.getAttribute(record.attributeName) || '').length;
  };
  new MutationObserver((records) => {
    state.mutations += records.length;
    if (state.tooLarge) { neutralize(); return; }
    // Growth is summed over what was added (removals ignored): only when the sum could pass
    // the cap is the whole document measured again.
    for (const record of records) {
      state.growth += grown(record);
      if (state.size + state.growth > cap) break;
    }
    if (state.size + state.growth <= cap) return;
    state.size = lowerBound(document, cap + 1);
    state.growth = 0;
    if (state.size > cap) { state.tooLarge = state.size; neutralize(); }
  }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
  globalThis.__tributaryProbe = {
    poll: () => ({ready: document.readyState === 'complete', mutations: state.mutations, tooLarge: state.tooLarge}),
    finish: () => {
      for (const a of document.querySelectorAll('a[href], area[href]')) a.setAttribute('href', a.href);
      for (const f of document.querySelectorAll('iframe[src], frame[src]')) f.setAttribute('src', f.src);
      const bound = Math.max(state.tooLarge, lowerBound(document, cap + 1));
      if (bound > cap) return {tooLarge: bound};
      let html = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '';
      if (document.documentElement) html += document.documentElement.outerHTML;
      return html.length > cap ? {tooLarge: html.length} : {html};
    },
  };
})();"""
_CONTEXT_POLL_S = 0.01
_DETACH_TIMEOUT_S = 2.0


class ProbeError(Exception):
    """The probe's script failed or its world is gone (``detail``: the browser's words)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    ready: bool  # the document's load event has fired
    mutations: int
    too_large: int  # the serialised DOM's length once it passed the cap, else 0


class PageProbe:
    """One render's DevTools session on its page; :meth:`attach` before the page's navigation."""

    def __init__(self, session: Any, frame_id: str) -> None:
        self._session = session
        self._frame_id = frame_id
        self._context: int | None = None

    @classmethod
    async def attach(cls, page: Any, max_chars: int) -> PageProbe:
        session = await page.context.new_cdp_session(page)
        tree = await session.send("Page.getFrameTree")
        probe = cls(session, tree["frameTree"]["frame"]["id"])
        session.on("Runtime.executionContextCreated", probe._on_context_created)
        session.on("Runtime.executionContextDestroyed", probe._on_context_destroyed)
        session.on("Runtime.executionContextsCleared", probe._on_contexts_cleared)
        await session.send("Page.enable")  # the session's scripts run only with its Page domain on
        await session.send("Runtime.enable")
        source = _INIT_JS % {"cap": max_chars}
        await session.send("Page.addScriptToEvaluateOnNewDocument", {"source": source, "worldName": _WORLD})
        # Runtime.enable reported the contexts that exist, an earlier document's world of the same
        # name among them (worlds are the frame's, by name): only the coming document's counts.
        probe._context = None
        return probe

    def _on_context_created(self, event: dict[str, Any]) -> None:
        context = event.get("context") or {}
        frame = (context.get("auxData") or {}).get("frameId")
        if context.get("name") == _WORLD and frame == self._frame_id:
            self._context = context.get("id")

    def _on_context_destroyed(self, event: dict[str, Any]) -> None:
        if event.get("executionContextId") == self._context:
            self._context = None

    def _on_contexts_cleared(self, event: dict[str, Any]) -> None:
        self._context = None

    async def _call(self, method: str) -> dict[str, Any]:
        while self._context is None:  # created with the document; the caller's deadline bounds this
            await asyncio.sleep(_CONTEXT_POLL_S)
        answer = await self._session.send(
            "Runtime.evaluate",
            {"expression": f"__tributaryProbe.{method}()", "contextId": self._context, "returnByValue": True},
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            raise ProbeError((details.get("exception") or {}).get("description") or details.get("text", ""))
        value = answer.get("result", {}).get("value")
        if not isinstance(value, dict):
            raise ProbeError(f"the probe answered {type(value).__name__}")
        return value

    async def poll(self) -> Snapshot:
        value = await self._call("poll")
        return Snapshot(bool(value.get("ready")), int(value.get("mutations", 0)), int(value.get("tooLarge", 0)))

    async def finish(self) -> tuple[str | None, int]:
        """The serialised DOM, or None and its length when that is over the cap."""
        value = await self._call("finish")
        html = value.get("html")
        return (html, len(html)) if isinstance(html, str) else (None, int(value.get("tooLarge", 0)))

    async def detach(self) -> None:
        """Ends the session; its script and world go with it (the next document gets neither).
        Bounded: after a timeout the browser is about to be killed and may not answer."""
        with contextlib.suppress(Exception):  # the page or browser is already gone
            await asyncio.wait_for(self._session.detach(), _DETACH_TIMEOUT_S)
