"""The status page: one static HTML file with vanilla JS and an inline SVG chart (no build step)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def page_html() -> str:
    """The page's HTML; it reads `/pools` and the shown pool's `status` (its rollout too: phase, promoted
    version, each node's version and state, the last judgement) and `decisions` itself (the pool in the
    address, `#pool=NAME`, else the first), and sends the token only on pause/resume."""
    return files("api").joinpath("static/index.html").read_text()
