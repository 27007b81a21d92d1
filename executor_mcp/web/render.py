"""The console's HTML: Jinja2 templates (packaged beside this module) rendered from plain values, and the
headers every console page carries. No I/O beyond reading the packaged files once.

Autoescaping is on for every template and undefined names raise, so a value reaches a page only escaped and a
misspelt one fails a test instead of rendering empty. Pages load their script and style from `/static/` under a
CSP that allows nothing else: no inline script, no other origin, no framing, no form posted elsewhere.
"""

import hashlib
import mimetypes
from pathlib import Path
from typing import Any

import attrs
import jinja2

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
STATIC_PREFIX = "/static/"
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}

_environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, **values: Any) -> str:
    return _environment.get_template(template).render(**values)


def page_headers() -> dict[str, str]:
    """Nothing cached or framed, no referrer (approval and link paths name what they open), and a CSP that
    lets the page run only this server's own script and style, and talk only to this server."""
    return {
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'"
        ),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
    }


@attrs.frozen
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """The files `/static/<name>` serves, read once: only these names exist, so no path reaches elsewhere."""
    assets = {}
    for path in sorted(STATIC.iterdir()):
        content_type = _STATIC_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
        if path.is_file() and content_type is not None:
            body = path.read_bytes()
            assets[path.name] = Asset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return assets
