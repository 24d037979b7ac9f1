"""Third-party HTML (tlparse's pages) rebuilt from an allow-list, so no script it holds can run on the site.

`sanitise(html)` parses the page and writes back only allowed elements and attributes, text escaped:
no <script>, <iframe>, <object>, <embed>, <svg>, <base>, <form> or refreshing <meta>; no `on*` handler, no
`javascript:` (or any scheme but http, https and, for images, `data:image/`) in a link; comments dropped;
<style> kept with every `<` escaped so it cannot close itself. The page also opens with a Content Security
Policy that allows no script at all, a second lock should a browser parse something differently.
(docs/report.md says why the pages are sanitised rather than framed.)
"""

from __future__ import annotations

import re
from html import escape
from html.parser import HTMLParser

CSP = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'self' "
       "'unsafe-inline'; img-src 'self' data:\">")

TAGS = frozenset("""html head body title meta link style h1 h2 h3 h4 h5 h6 p div span a ul ol li dl dt dd table
thead tbody tfoot tr th td caption colgroup col pre code br hr b i em strong small sub sup details summary img
blockquote section header footer main nav article aside abbr kbd samp var tt u s mark label figure figcaption
center font q cite del ins wbr""".split())
VOID = frozenset("meta link br hr img col wbr base embed param source track area input frame keygen".split())
# Elements dropped with everything inside them.
DROP = frozenset("""script iframe object embed frame frameset noscript template svg math applet base form
textarea select button input portal noembed noframes xmp plaintext audio video canvas dialog""".split())
ATTRS = frozenset("""class id title style href src alt colspan rowspan width height open lang dir charset rel name
align valign border cellpadding cellspacing scope headers start reversed type color size""".split())
URL_ATTRS = frozenset({"href", "src"})
_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):")
_CONTROL = re.compile(r"[\x00-\x20\x7f]+")


def safe_url(value: str, image: bool = False) -> bool:
    """A relative link, a fragment, or http(s) (an image may also be inline data:image/...)."""
    v = _CONTROL.sub("", value).lower()
    m = _SCHEME.match(v)
    if m is None:
        return True
    if m.group(1) in ("http", "https"):
        return True
    return image and v.startswith(("data:image/png", "data:image/gif", "data:image/jpeg", "data:image/webp"))


def _safe_style(value: str) -> bool:
    v = _CONTROL.sub("", value).lower()
    return not any(bad in v for bad in ("url(", "expression", "\\", "javascript", "@import", "behavior"))


class _Sanitiser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.dropping = 0  # inside this many DROP elements
        self.in_style = False

    def _attrs(self, tag: str, attrs: list[tuple[str, str | None]]) -> str | None:
        kept = []
        items = {k.lower(): (v or "") for k, v in attrs}
        if tag == "meta":
            return f' charset="{escape(items["charset"])}"' if "charset" in items else None
        if tag == "link":
            rel, href = items.get("rel", "").lower().split(), items.get("href", "")
            if rel != ["stylesheet"] or not href or _SCHEME.match(_CONTROL.sub("", href).lower()):
                return None
            return f' rel="stylesheet" href="{escape(href)}"'
        for key, value in items.items():
            if key not in ATTRS or key.startswith("on"):
                continue
            if key in URL_ATTRS and not safe_url(value, image=tag == "img"):
                continue
            if key == "style" and not _safe_style(value):
                continue
            kept.append(f' {key}="{escape(value)}"')
        return "".join(kept)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        tag = tag.lower()
        if tag in DROP:
            if tag not in VOID:
                self.dropping += 1
            return
        if self.dropping or tag not in TAGS:
            return
        text = self._attrs(tag, attrs)
        if text is None:
            return
        self.out.append(f"<{tag}{text}>")
        self.in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag.lower() not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        tag = tag.lower()
        if tag in DROP:
            if tag not in VOID and self.dropping:
                self.dropping -= 1
            return
        if self.dropping or tag not in TAGS or tag in VOID:
            return
        self.out.append(f"</{tag}>")
        if tag == "style":
            self.in_style = False

    def handle_data(self, data: str) -> None:
        if self.dropping:
            return
        if self.in_style:
            self.out.append(data.replace("<", "\\3c "))
        else:
            self.out.append(escape(data, quote=False))


def sanitise(html: str) -> str:
    """`html` rebuilt from the allow-list, opened by a script-forbidding Content Security Policy."""
    parser = _Sanitiser()
    parser.feed(html)
    parser.close()
    return "<!doctype html>\n" + CSP + "\n" + "".join(parser.out)
