"""The one waiting helper (rl_assets/domain/waiting.py), on a fake clock: no test here really sleeps.

Every deadline loop of the package goes through it, so its edges are checked once here: a state already
there costs no sleep, the interval is the cadence, the timeout is the caller's error, and a server's
refusals are waited out then re-raised as they are.
"""

from __future__ import annotations

import math

import pytest
from fakes.clock import FakeClock


def test_a_state_already_there_costs_no_sleep() -> None:
    clock = FakeClock()
    clock.waiting(timeout_s=3.0).until("ready", lambda: True)
    assert clock.sleeps == []


def test_until_looks_every_interval_and_names_what_it_waited_for() -> None:
    clock = FakeClock()
    looks = iter([False, False, True])
    clock.waiting(timeout_s=3.0, interval_s=0.5).until("ready", lambda: next(looks))
    assert clock.sleeps == [0.5, 0.5]
    with pytest.raises(TimeoutError, match=r"^never: not reached within 3s$"):
        clock.waiting(timeout_s=3.0).until("never", lambda: False)
    assert clock.now == 1.0 + 3.0, "the last look is at the deadline itself, then no more sleeping"


def test_value_returns_the_probe_and_raises_the_callers_own_error() -> None:
    clock = FakeClock()
    answers = iter([None, [], ["port"]])
    assert clock.waiting(timeout_s=3.0).value(lambda: next(answers), lambda: AssertionError("unused")) == ["port"]
    with pytest.raises(RuntimeError, match="did not open"):
        clock.waiting(timeout_s=3.0).value(lambda: 0, lambda: RuntimeError("did not open"))


def test_retrying_waits_out_the_listed_errors_then_reraises_the_last() -> None:
    clock = FakeClock()
    refusals = iter([ConnectionError("restarting"), ConnectionError("still restarting")])

    def connect() -> str:
        if (refusal := next(refusals, None)) is not None:
            raise refusal
        return "connection"

    assert clock.waiting(timeout_s=3.0).retrying(connect, (ConnectionError,)) == "connection"
    assert clock.sleeps == [1.0, 1.0]

    clock = FakeClock()

    def refused() -> str:
        raise ConnectionError(f"refused at {clock.now:g}")

    with pytest.raises(ConnectionError, match=r"refused at 3$"):
        clock.waiting(timeout_s=3.0).retrying(refused, (ConnectionError,))

    clock = FakeClock()

    def broken() -> str:
        raise ValueError("not a restart")

    with pytest.raises(ValueError):
        clock.waiting(timeout_s=3.0).retrying(broken, (ConnectionError,))
    assert clock.sleeps == [], "an error not listed is raised at once"


def test_a_deadline_for_loops_that_do_their_own_looking() -> None:
    clock = FakeClock()
    deadline = clock.waiting(timeout_s=2.0, interval_s=0.75).deadline()
    looks = 0
    while not deadline.expired():
        looks += 1
        deadline.sleep()
    assert looks == 3 and clock.sleeps == [0.75, 0.75, 0.75]
    assert deadline.expired(), "once up, the time stays up"


def test_an_infinite_timeout_never_expires() -> None:
    clock = FakeClock()
    deadline = clock.waiting(timeout_s=math.inf).deadline()
    clock.now = 1e12
    assert not deadline.expired()
