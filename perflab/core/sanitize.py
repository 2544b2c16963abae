"""Markdown rendered for the report with no way for its text to run in the reader's browser.

The report shows Markdown written from other runs' files (a comparison's
``summary.md`` names the other run's directory and its diagnosis labels) and
from this run's (``diagnosis.md``). Markdown passes raw HTML through, so
:func:`markdown_html` renders it with raw HTML escaped and harmful link schemes
(``javascript:``, ``data:``, ...) replaced, then checks what came out against an
allowlist of tags and attributes: anything else and the text is shown verbatim
in a ``<pre>`` instead. Whatever mistune version is installed, nothing live gets
through.

Nor does anything load from outside the report (it is read offline, and a remote image in
another run's text is a tracking pixel): an image in the Markdown is shown as its alt text
and address, and a link leaves the page only as text — only an anchor (``#...``) within
the report stays a link.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

#: the tags Markdown produces, and the attributes each may carry
ALLOWED = {
    **{t: set() for t in ("p", "ul", "ol", "li", "table", "thead", "tbody", "tr", "strong",
                          "em", "code", "pre", "blockquote", "hr", "br", "del", "h1", "h2",
                          "h3", "h4", "h5", "h6")},
    "th": {"style"}, "td": {"style"}, "a": {"href", "title"},
}


def _safe_url(url: str) -> bool:
    """Only an anchor within the page: anything else could leave it or load from outside."""
    u = "".join(url.split())  # browsers ignore whitespace inside a scheme
    return u.startswith("#")


class _Audit(HTMLParser):
    """Collects every tag, attribute and URL outside :data:`ALLOWED`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED:
            self.problems.append(f"tag <{tag}>")
            return
        for name, value in attrs:
            if name not in ALLOWED[tag]:
                self.problems.append(f"attribute {name} on <{tag}>")
            elif name in ("href", "src") and not _safe_url(value or ""):
                self.problems.append(f"URL {value!r}")
            elif name == "style" and not (value or "").replace(" ", "").startswith("text-align:"):
                self.problems.append(f"style {value!r}")

    handle_startendtag = handle_starttag


def audit(fragment: str) -> list[str]:
    """What in an HTML fragment lies outside the allowlist (empty: safe to show)."""
    parser = _Audit()
    parser.feed(fragment)
    parser.close()
    return parser.problems


def _renderer():
    """mistune's HTML renderer, with images and links off the page shown as text."""
    import mistune

    class Offline(mistune.HTMLRenderer):
        def image(self, text: str, url: str, title: str | None = None) -> str:
            return f"[image: {text} &lt;{html.escape(url)}&gt;]"

        def link(self, text: str, url: str, title: str | None = None) -> str:
            if _safe_url(url):
                return super().link(text, url, title)
            return f"{text} &lt;{html.escape(url)}&gt;"

    return Offline(escape=True)


def markdown_html(text: str) -> str:
    """``text`` (Markdown) as an HTML fragment in which nothing can run or load."""
    import mistune

    render = mistune.create_markdown(escape=True, renderer=_renderer(), plugins=["table"])
    out = render(text)
    if audit(out):
        return f"<pre>{html.escape(text)}</pre>"
    return out
