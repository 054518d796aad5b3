"""`manage.py bench --repeat N`: the measured run N times, each in a fresh database, then
each figure's median and range over the runs. On a shared 2-core machine one run says
little (the same code measured 4.5 and 6.3 ms of CPU per effect within the hour), so the
figures that are judged are medians of several runs, with their ranges.

Each run prints its figures as one `BENCH_JSON {...}` line, figure → what it printed
("4,742 tps", "0.083", "9.4 / 17.7 ms"); `summary` reads those back."""

import re
import statistics

NUMBER = re.compile(r"\d[\d,]*(?:\.(\d+))?")


def numbers(printed: str) -> list[tuple[float, int]]:
    """The numbers of a printed figure, each with its count of decimals:
    "4,742 tps" → [(4742.0, 0)], "9.4 / 17.7 ms" → [(9.4, 1), (17.7, 1)]."""
    return [
        (float(m.group(0).replace(",", "")), len(m.group(1) or ""))
        for m in NUMBER.finditer(printed)
    ]


def summary(runs: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(figure, "median (lowest–highest)") for each figure every run printed with the same
    count of numbers, in the first run's order, written as the runs wrote it; a figure of
    several numbers ("p50 / p99") gets a median and a range for each, then its unit."""
    rows = []
    for label, first in runs[0].items():
        each = [numbers(run.get(label, "")) for run in runs]
        if not each[0] or any(len(n) != len(each[0]) for n in each):
            continue
        cells = []
        for i, (_, decimals) in enumerate(each[0]):
            xs = [n[i][0] for n in each]
            low, mid, high = (
                f"{x:,.{decimals}f}" for x in (min(xs), statistics.median(xs), max(xs))
            )
            cells.append(f"{mid} ({low}–{high})")
        unit = NUMBER.sub("", first).replace("/", "").strip()  # "ms", "tps", "KB" or none
        rows.append((label, " / ".join(cells) + (f" {unit}" if unit else "")))
    return rows
