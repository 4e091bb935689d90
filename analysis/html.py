"""report.html: the report's blocks (analysis/report.py) as one self-contained HTML page.

Pure: blocks and the figures' PNG bytes in, text out. Figures are embedded as base64 data URIs and
the page links to nothing, so it reads the same opened from the output folder or previewed as an
artifact in the MLflow UI (which shows HTML in a sandboxed iframe, where relative links go
nowhere). Every piece of text is HTML-escaped before the two inline marks of the blocks (`code`,
**bold**) become tags, so run names, tags and error messages cannot inject markup.
"""

from __future__ import annotations

import base64
import html
import math
import re

from analysis.markdown import Table

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0.6em auto;
       max-width: 1800px; padding: 0 1em; line-height: 1.4; color: #1a1a1a; font-size: 14px; }
h1 { font-size: 1.35em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.15em; margin-top: 1.4em; border-bottom: 1px solid #ddd; }
p, li { margin: 0.35em 0; }
code { background: #f3f3f3; padding: 0 0.2em; border-radius: 3px; font-size: 0.92em; }
.table { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.15em 0.35em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f3f3f3; font-weight: 600; }
td { font-variant-numeric: tabular-nums; }
p.continued { font-size: 0.85em; color: #444; margin: 0.2em 0; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #444; }
"""

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def inline(text: str) -> str:
    """Escaped text with `code` and **bold** as tags."""
    out = html.escape(str(text), quote=True)
    out = _CODE.sub(r"<code>\1</code>", out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


MAX_COLUMNS = 9
"""a table of more columns is shown as parts of at most this many, the row number `#` first in
each: MLflow's artifact viewer is about 950 px wide (871 px beside its panels), and a 15-column
table is not (1191 px), nor the 11-column Findings table once its samples/s carry the runs'
range (892 px)"""


def table_parts(table: Table, most: int = MAX_COLUMNS) -> list[Table]:
    """`table` as it is when it has at most `most` columns, else split into parts of about equal
    width in columns (at most `most`, `#` included), each row numbered in every part."""
    n = len(table.headers)
    if n <= most:
        return [table]
    size = math.ceil(n / math.ceil(n / (most - 1)))
    parts = []
    for start in range(0, n, size):
        cols = range(start, min(n, start + size))
        parts.append(
            Table(
                ["#", *(table.headers[c] for c in cols)],
                [[i, *(row[c] for c in cols)] for i, row in enumerate(table.rows, 1)],
            )
        )
    return parts


def _one_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in table.rows
    )
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def table_html(table: Table) -> str:
    """The table, in parts that fit the artifact viewer when it is wide (`table_parts`)."""
    parts = table_parts(table)
    if len(parts) == 1:
        return _one_table(parts[0])
    more = '<p class="continued">Continued: the same rows, by <code>#</code>.</p>'
    return more.join(_one_table(t) for t in parts)


def figure_html(title: str, path: str, png: bytes | None) -> str:
    caption = f"<figcaption>{html.escape(title)} (<code>{html.escape(path)}</code>)</figcaption>"
    if png is None:  # never a broken image: say what is missing
        return (
            f"<figure><p>Figure not drawn: <code>{html.escape(path)}</code></p>{caption}</figure>"
        )
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(title)}">'
        f"{caption}</figure>"
    )


def render(blocks: list, images: dict[str, bytes]) -> str:
    """The page: `images` maps each figure block's path to its PNG bytes."""
    title = next((b[1] for b in blocks if b[0] == "h1"), "Report")
    parts = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{inline(rest[0])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{inline(rest[0])}</p>")
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in rest[0]) + "</ul>")
        elif kind == "table":
            parts.append(table_html(rest[0]))
        elif kind == "figure":
            parts.append(figure_html(rest[0], rest[1], images.get(rest[1])))
        else:
            raise ValueError(f"unknown report block {kind!r}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
