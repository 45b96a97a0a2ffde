"""The smallest drop the gate calls a regression on a 0/1 task of n items (pass@1, exact_match), by the
rule `significant` (the policy's default is `point`) with margin 0.05: the gate's own interval
(evals/paired_binary.py, Tango's interval held at 0 where exact McNemar finds no difference) must exclude 0
and the drop exceed the margin.
A candidate also gains some items it used to fail (quantized models flip items both ways): the columns give
the smallest observed drop for 0%, 5% and 10% of the items gained.

Usage: python benchmarks/detectable_drop.py [--sizes 20 40 80 164] [--margin 0.05]
"""

from __future__ import annotations

import argparse

from evals.paired_binary import paired_binary_interval

GAINED_SHARES = (0.0, 0.05, 0.10)


def smallest_regression(n: int, gained: int, margin: float, confidence: float = 0.95) -> tuple[int, float] | None:
    """(items lost, drop) of the smallest drop called a regression with `gained` items gained; None: none is."""
    for lost in range(gained, n + 1):
        _, high = paired_binary_interval(lost, gained, n, confidence)   # of (gained - lost) / n
        drop = (lost - gained) / n
        if drop > margin + 1e-9 and float(high) < 0:
            return lost, drop
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 40, 80, 164, 409])
    parser.add_argument("--margin", type=float, default=0.05)
    args = parser.parse_args()
    print("| items | " + " | ".join(f"{share:.0%} gained" for share in GAINED_SHARES) + " |")
    print("|---|" + "---|" * len(GAINED_SHARES))
    for n in args.sizes:
        cells = []
        for share in GAINED_SHARES:
            gained = round(share * n)
            found = smallest_regression(n, gained, args.margin)
            cells.append(f"{found[1]:.3f} ({found[0]} lost, {gained} gained)" if found else "none")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
