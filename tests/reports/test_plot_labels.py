"""Plot labels of variants that cluster do not pile on top of each other."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.plot_labels import _overlap, place_labels  # noqa: E402


def test_clustered_points_get_labels_that_do_not_overlap():
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    # six variants within a hair of each other, as the demo's accuracy-vs-throughput panel has them
    points = [(100 + i * 0.5, 0.80 + (i % 2) * 0.001, f"w4a16-variant-{i}") for i in range(6)]
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points])
    ax.set_xlim(80, 125)
    ax.set_ylim(0.7, 0.9)
    fig.tight_layout()
    boxes = place_labels(ax, points)
    assert len(boxes) == 6
    assert all(_overlap(a, b) == 0 for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)


def test_a_lone_point_keeps_its_label_beside_it():
    fig, ax = plt.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 1)
    [box] = place_labels(ax, [(5, 0.5, "bf16")])
    x, y = ax.transData.transform((5, 0.5))
    assert box.x0 > x and box.y0 > y and box.x0 - x < 15   # the first offset: just above right
    plt.close(fig)
