"""`bench --repeat`: each figure's median and range over the runs' BENCH_JSON lines."""

from bench.repeat import numbers, summary


def test_numbers_keep_their_decimals_and_thousands():
    assert numbers("4,742 tps") == [(4742.0, 0)]
    assert numbers("9.4 / 17.7 ms") == [(9.4, 1), (17.7, 1)]
    assert numbers("0.083") == [(0.083, 3)]
    assert numbers("not installed") == []


def test_each_figure_gets_its_median_and_range_as_the_runs_wrote_it():
    runs = [
        {
            "pgbench TPC-B": "4,470 tps",
            "effects/s end to end ÷ TPC-B": "0.060",
            "p50 / p99": "9.7 / 21.0 ms",
        },
        {
            "pgbench TPC-B": "5,178 tps",
            "effects/s end to end ÷ TPC-B": "0.071",
            "p50 / p99": "13.6 / 28.0 ms",
        },
        {
            "pgbench TPC-B": "4,819 tps",
            "effects/s end to end ÷ TPC-B": "0.054",
            "p50 / p99": "11.9 / 24.5 ms",
        },
    ]
    assert summary(runs) == [
        ("pgbench TPC-B", "4,819 (4,470–5,178) tps"),
        ("effects/s end to end ÷ TPC-B", "0.060 (0.054–0.071)"),
        ("p50 / p99", "11.9 (9.7–13.6) / 24.5 (21.0–28.0) ms"),
    ]


def test_a_figure_some_run_did_not_print_alike_is_left_out():
    runs = [
        {"DBOS anchor": "not installed", "ledger hits/s": "937.6", "latency": "nan / nan ms"},
        {"DBOS anchor": "not installed", "ledger hits/s": "1,015.3"},
    ]
    assert summary(runs) == [("ledger hits/s", "976.5 (937.6–1,015.3)")]
