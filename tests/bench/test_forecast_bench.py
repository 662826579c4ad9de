"""The forecast benchmark runs at tiny sizes: a row per slot and the step, at two sizes, each
with its goals met or missed."""

from fitting.bench import forecast


def test_a_quick_run_prints_a_row_per_slot_and_step_at_both_sizes(tmp_path):
    text = forecast.main(["--quick", "--device", "cpu"], doc=tmp_path / "benchmarks.md")
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]
    assert [r.split(",")[0][2:] for r in rows] == [*forecast.TWINS, "step"] * 2
    for row in rows:  # the goals at any size (attention's is at context 256 only)
        slot, goals = row.split(",")[0][2:], row.split("|")[-2]
        assert ("met" in goals or "missed" in goals) == any(
            at is None for _, _, at in forecast.GOALS.get(slot, []))
