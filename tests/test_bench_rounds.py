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


def test_the_spin_follows_each_flush_and_is_removed_afterwards(monkeypatch):
    """bench/timing.py's host slack: within the context triton's flush is followed by a GPU spin of the asked
    length (cycles at 2 GHz); afterwards the driver flushes as before, also when the timed code raised."""
    import sys
    import types

    from bench import timing

    events = []

    class Driver:
        def clear_cache(self, cache):
            events.append(("flush", cache))

    driver = Driver()
    fake_triton = types.ModuleType("triton")
    fake_triton.runtime = types.SimpleNamespace(driver=types.SimpleNamespace(active=driver))
    monkeypatch.setitem(sys.modules, "triton", fake_triton)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: events.append(("spin", cycles)))

    with timing.gpu_spin_after_flush(150):
        driver.clear_cache("buffer")
    assert events == [("flush", "buffer"), ("spin", 150 * timing.SPIN_CYCLES_PER_US)]
    events.clear()
    with pytest.raises(RuntimeError), timing.gpu_spin_after_flush(150):
        raise RuntimeError("a column failed")
    driver.clear_cache("buffer")
    assert events == [("flush", "buffer")]
    with timing.gpu_spin_after_flush(0):
        driver.clear_cache("buffer")
    assert events == [("flush", "buffer")] * 2


def test_the_command_line_sets_the_host_slack():
    from bench.run import parse_args
    from bench.timing import HOST_SLACK_US
    assert parse_args([]).host_slack_us == HOST_SLACK_US
    assert parse_args(["--host-slack-us", "0"]).host_slack_us == 0
