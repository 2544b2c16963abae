"""Markdown rendered for the report with no way for its text to run in the reader's browser.

The report shows Markdown written from other runs' files (a comparison's
``summary.md`` names the other run's directory and its diagnosis labels) and
from this run's (``diagnosis.md``). Markdown passes raw HTML through, so
:func:`markdown_html` renders it with raw HTML escaped and harmful link schemes
(``javascript:``, ``data:``, ...) replaced, then checks what came out against an
allowlist of tags and attributes: anything else and the text is shown verbatim
in a ``<pre>`` instead. Whatever mistune version is installed, nothing live gets
through.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

#: the tags Markdown produces, and the attributes each may carry
ALLOWED = {
    **{t: set() for t in ("p", "ul", "ol", "li", "table", "thead", "tbody", "tr", "strong",
                          "em", "code", "pre", "blockquote", "hr", "br", "del", "h1", "h2",
                          "h3", "h4", "h5", "h6")},
    "th": {"style"}, "td": {"style"}, "a": {"href", "title"}, "img": {"src", "alt", "title"},
}
#: URL schemes a link may use (a relative link or an anchor has none)
SAFE_SCHEMES = ("http", "https", "mailto")


def _safe_url(url: str) -> bool:
    u = "".join(url.split()).lower()  # browsers ignore whitespace inside a scheme
    scheme, sep, _ = u.partition(":")
    return not sep or "/" in scheme or "#" in scheme or "?" in scheme or scheme in SAFE_SCHEMES


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


def markdown_html(text: str) -> str:
    """``text`` (Markdown) as an HTML fragment in which nothing can run."""
    import mistune

    render = mistune.create_markdown(escape=True, plugins=["table"])
    out = render(text)
    if audit(out):
        return f"<pre>{html.escape(text)}</pre>"
    return out
