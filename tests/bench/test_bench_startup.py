"""The start-up benchmark's report: each command's runs, and the app against each bare loop as
the ratio of the medians and as the median of the rounds' ratios."""

from fitting.bench.startup import report


def test_report_gives_the_ratio_of_medians_and_the_median_of_round_ratios():
    walls = {"app": [5.0, 8.0, 6.0], "bare-optim": [5.0, 8.0, 6.0], "bare-manual": [4.0, 4.0, 2.0]}
    cpus = {"app": [3.0] * 3, "bare-optim": [3.0] * 3, "bare-manual": [2.0] * 3}
    lines = report(walls, cpus)
    assert lines[:3] == [
        "| command | wall median (s) | CPU median (s) | wall of each run (s) |",
        "|---|---:|---:|---|",
        "| app | 6.00 | 3.00 | 5.00, 8.00, 6.00 |",
    ]
    assert "| bare-manual | 4.00 | 2.00 | 4.00, 4.00, 2.00 |" in lines
    # Medians 6 / 4; rounds 5/4, 8/4, 6/2.
    assert lines[-1] == ("- app / bare-manual: wall 1.50x (median of the rounds' ratios 2.00x), "
                         "CPU 1.50x")
    assert lines[-2] == ("- app / bare-optim: wall 1.00x (median of the rounds' ratios 1.00x), "
                         "CPU 1.00x")
