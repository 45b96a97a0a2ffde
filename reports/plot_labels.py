"""Point labels that do not overlap: each label takes the first of a ring of offsets around its point where its
box overlaps no label placed before it and stays inside the axes; where none is free, the least crowded one.
A label moved off its nearest spot gets a thin line to its point."""

from __future__ import annotations

from itertools import product

# Offsets in points from the data point, nearest first.
OFFSETS = [(dx, dy) for r in (1, 2, 3, 4) for dx, dy in product((5 * r, -5 * r), (4 * r, -10 * r))] + \
          [(0, 14 * r) for r in (1, 2, 3)] + [(0, -18 * r) for r in (1, 2, 3)]


def _overlap(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _outside(box, frame) -> float:
    return box.width * box.height - _overlap(box, frame)


def place_labels(ax, labels: list[tuple[float, float, str]], fontsize: float = 8) -> list:
    """Annotate each (x, y, text) on ax; returns the labels' boxes in display coordinates. Call after the
    axes' limits and the figure's layout are final: the placement is computed in display space."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed = []
    for x, y, text in labels:
        best = None
        for dx, dy in OFFSETS:
            note = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                               ha="left" if dx >= 0 else "right")
            box = note.get_window_extent(renderer)
            crowding = sum(_overlap(box, other) for other in placed) + _outside(box, frame)
            note.remove()
            if best is None or crowding < best[0]:
                best = (crowding, (dx, dy), box)
            if crowding == 0:
                break
        _, (dx, dy), box = best
        leader = {"arrowprops": {"arrowstyle": "-", "color": "0.6", "lw": 0.5}} if (dx, dy) != OFFSETS[0] else {}
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                    ha="left" if dx >= 0 else "right", **leader)
        placed.append(box)
    return placed
