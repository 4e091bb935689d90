"""report.md and report.html from the report's blocks (analysis/report.py, analysis/html.py)."""

from __future__ import annotations

import base64
import html as html_module
import re

from analysis import html, report
from analysis.markdown import Table

PNG = b"\x89PNG\r\n\x1a\n fake bytes"
EVIL = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'


def blocks():
    return [
        ("h1", "Report"),
        ("p", f"from `{EVIL}` with **bold**"),
        ("list", [EVIL, "plain"]),
        ("table", Table(["env", "error"], [[EVIL, "a|b"]])),
        ("figure", f"Roofline {EVIL}", "figures/roofline_all.png"),
        ("figure", "Not drawn", "figures/missing.png"),
    ]


def test_html_escapes_user_text_everywhere_and_keeps_the_inline_marks():
    page = html.render(blocks(), {"figures/roofline_all.png": PNG})
    assert "<script>" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") == 5
    assert "<code>&lt;script&gt;" in page and "<strong>bold</strong>" in page
    assert "<td>a|b</td>" in page


def test_html_embeds_figures_links_nothing_and_never_shows_a_broken_image():
    page = html.render(blocks(), {"figures/roofline_all.png": PNG})
    assert f'<img src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in page
    assert re.findall(r"<img ", page) == ["<img "]  # the missing figure is named, not linked
    assert "Figure not drawn: <code>figures/missing.png</code>" in page
    assert re.findall(r'\b(?:src|href)="(?!data:)', page) == []


def test_markdown_names_figures_without_linking_them():
    md = report.markdown_text(blocks())
    assert (
        "Figure: Roofline" in md and "(`figures/roofline_all.png`, embedded in report.html)" in md
    )
    assert "](" not in md
    # Markdown escapes HTML in user text too (hostile-input): it is read, never rendered
    assert "| " + html_module.escape(EVIL, quote=False).replace("|", "\\|") + " | a\\|b |" in md
