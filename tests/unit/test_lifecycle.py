"""The session lifecycle table, exhaustively: every (state, event) pair is either listed or illegal."""

import itertools

import pytest

from executor_mcp.protocol.errors import Refusal
from executor_mcp.sessions.lifecycle import (
    REFUSALS,
    TRANSITIONS,
    Event,
    IdlePolicy,
    IllegalTransition,
    Lifecycle,
    State,
    idle_verdict,
)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_pair_is_listed_or_refused(state: State, event: Event) -> None:
    lifecycle = Lifecycle(state)
    if (state, event) in TRANSITIONS:
        assert lifecycle.can(event)
        assert lifecycle.fire(event) is TRANSITIONS[state, event]
    else:
        assert not lifecycle.can(event)
        with pytest.raises(IllegalTransition):
            lifecycle.fire(event)
        assert lifecycle.state is state


def test_terminal_states_have_no_way_out() -> None:
    for terminal in (State.WIPED, State.RESTARTING):
        assert not [event for event in Event if (terminal, event) in TRANSITIONS]


def test_condemned_only_leads_to_wiped() -> None:
    assert [target for (state, _), target in TRANSITIONS.items() if state is State.CONDEMNED] == [State.WIPED]


def test_a_session_can_be_restored_used_and_condemned() -> None:
    lifecycle = Lifecycle()
    for event in (Event.RESTORE, Event.RESTORED, Event.FAULT, Event.RESTORE, Event.RESTORED, Event.CONDEMN):
        lifecycle.fire(event)
    assert lifecycle.refusal is Refusal.SESSION_TERMINATED
    lifecycle.fire(Event.WIPED)
    assert lifecycle.refusal is Refusal.SESSION_NOT_FOUND


def test_arriving_and_in_flight_requests_get_the_same_vocabulary() -> None:
    assert REFUSALS[State.CONDEMNED] is Refusal.SESSION_TERMINATED
    assert REFUSALS[State.RESTARTING] is Refusal.RESTARTING
    assert Lifecycle(State.DISPOSED).in_flight_refusal is Refusal.RESTARTING  # the session lives on: retry it
    for state in set(State) - {State.DISPOSED}:
        lifecycle = Lifecycle(state)
        assert lifecycle.in_flight_refusal is (REFUSALS[state] or Refusal.INTERNAL)


def test_servable_states_refuse_nothing() -> None:
    for state in (State.DISPOSED, State.RESTORING, State.LIVE):
        assert Lifecycle(state).refusal is None


def test_refusals_carry_the_contract_statuses() -> None:
    assert (Refusal.SESSION_TERMINATED.value.status, Refusal.SESSION_TERMINATED.value.message) == (
        404,
        "Session timed out, please reconnect",
    )
    assert Refusal.RESTARTING.value.status == 503
    assert Refusal.RESTARTING.value.retry_after == 2
    assert Refusal.SESSION_NOT_FOUND.value.retry_after is None


def test_idle_verdicts() -> None:
    policy = IdlePolicy(session_timeout=10, paused_idle=30, running_idle=100)
    assert idle_verdict(policy, idle=4, paused=0, running=0) == 6
    assert idle_verdict(policy, idle=12, paused=0, running=0) is None
    assert idle_verdict(policy, idle=12, paused=1, running=0) == 10  # looked at again within a timeout
    assert idle_verdict(policy, idle=25, paused=1, running=0) == 5
    assert idle_verdict(policy, idle=31, paused=1, running=5) is None  # paused work: the paused clock alone
    assert idle_verdict(policy, idle=50, paused=0, running=1) == 10
    assert idle_verdict(policy, idle=95, paused=0, running=1) == 5
    assert idle_verdict(policy, idle=101, paused=0, running=1) is None
