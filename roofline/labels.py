"""Text placed on a figure so that labels overlap neither each other nor the points (used by the
rooflines, roofline/plot.py)."""

from __future__ import annotations

import numpy as np

CEILING_FONT = 8.2
POINT_FONT = 8.2  # legible at the viewer's width in an 8.4-inch figure (roofline.style)


class Labels:
    """Text placed in display space so that labels do not overlap each other or the points.

    Boxes are estimated from the font size (0.6 em per character), which is cheap and close enough
    for the short labels used here. Axis limits must be final before anything is placed.
    """

    def __init__(self, ax):
        self.ax = ax
        self.boxes: list[tuple[float, float, float, float]] = []
        self.px = ax.figure.dpi / 72  # display pixels per point

    def _box(self, x, y, dx, dy, text, ha, fontsize):
        lines = str(text).split("\n")
        w = 0.6 * fontsize * self.px * max(len(s) for s in lines)
        h = 1.25 * fontsize * self.px * len(lines)
        x0 = x + dx * self.px - (w if ha == "right" else 0)
        y0 = y + dy * self.px  # offsets are to the text's bottom (va="bottom")
        return (x0, y0, x0 + w, y0 + h)

    def _free(self, box) -> bool:
        return not any(
            box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in self.boxes
        )

    def block(self, xs, ys, half_px: float = 4.0) -> None:
        """Mark the markers at data (xs, ys) as taken."""
        for px, py in self.ax.transData.transform(np.column_stack([xs, ys])):
            self.boxes.append((px - half_px, py - half_px, px + half_px, py + half_px))

    def place(
        self,
        text: str,
        xy: tuple[float, float],
        offsets: list[tuple],
        *,
        ha: str = "left",
        color: str = "black",
        fontsize: float = CEILING_FONT,
        always: bool = True,
    ) -> bool:
        """Put `text` at the first offset (dx, dy[, ha]) in points from `xy` that overlaps nothing
        placed yet; with `always`, at the first offset when none is free. Returns whether it was placed."""
        x, y = self.ax.transData.transform([xy])[0]
        cands = [(o[0], o[1], o[2] if len(o) > 2 else ha) for o in offsets]
        boxes = [self._box(x, y, dx, dy, text, h, fontsize) for dx, dy, h in cands]
        free = [i for i, b in enumerate(boxes) if self._free(b)]
        if not free and not always:
            return False
        i = free[0] if free else 0
        self.boxes.append(boxes[i])
        self.ax.annotate(
            text,
            xy=xy,
            xytext=cands[i][:2],
            textcoords="offset points",
            ha=cands[i][2],
            va="bottom",
            fontsize=fontsize,
            color=color,
        )
        return True


ABOVE_RIGHT_END = [(-3, 2), (-3, -11), (-120, 2), (-120, -11), (-240, 2), (-240, -11)]
RIDGE = [(3, -22), (3, -44), (3, 4), (-60, -22)]
SLOPE = [(3, 4), (3, 16), (3, -12), (40, 4)]
POINT = [(4, 3), (4, -12), (-4, 3, "right"), (-4, -12, "right")]
