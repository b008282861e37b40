"""The benchmark's rounds (bench/runner.py): which cases are timed in several rounds, and what each column keeps."""
import pytest
import torch

from bench import quiet, runner


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    """The rounds' logic alone: no wait for a quiet machine."""
    monkeypatch.setattr(quiet, "settle", lambda *args, **kwargs: quiet.Settled(0.0, 0.0, True))


def time_columns(first_round_ms, rounds_below_ms):
    """Times two columns, each reading `first_round_ms` in its first round and half that in later ones; returns the
    columns' results."""
    calls = {"eager": 0, "convops_op": 0}

    def timer(call):
        column = call()  # the rotating call of the column's fn: its name
        calls[column] += 1
        return first_round_ms if calls[column] == 1 else first_round_ms / 2

    ready = {name: (lambda x, name=name: name) for name in calls}
    results = {name: {} for name in calls}
    runner._time_columns(ready, results, [torch.zeros(1)], timer, rounds_below_ms)
    return results


def test_a_case_over_the_threshold_is_timed_once():
    results = time_columns(first_round_ms=0.08, rounds_below_ms=runner.LAUNCH_BOUND_MS)
    for r in results.values():
        assert r["round_ms"] == [0.08] and r["ms"] == 0.08


def test_a_raised_threshold_times_it_in_rounds_keeping_the_fastest():
    results = time_columns(first_round_ms=0.08, rounds_below_ms=0.1)
    for r in results.values():
        assert len(r["round_ms"]) == runner.LAUNCH_BOUND_ROUNDS
        assert r["ms"] == pytest.approx(0.04) and r["ms"] == min(r["round_ms"])


def test_the_command_line_sets_the_threshold():
    from bench.run import parse_args
    assert parse_args([]).rounds_below_ms == runner.LAUNCH_BOUND_MS
    assert parse_args(["--rounds-below-ms", "0.5"]).rounds_below_ms == 0.5
