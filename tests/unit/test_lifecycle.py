"""The session lifecycle table, exhaustively: every (state, event) pair is either listed or illegal."""

import itertools

import pytest

from executor_mcp.protocol.errors import Refusal
from executor_mcp.sessions.lifecycle import (
    PHASE_REFUSALS,
    REFUSALS,
    TRANSITIONS,
    Drain,
    Event,
    IdlePolicy,
    IllegalTransition,
    Lifecycle,
    Phase,
    State,
    idle_verdict,
    listed_state,
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
        assert {TRANSITIONS[pair] for pair in TRANSITIONS if pair[0] is terminal} == {terminal}


def test_condemned_only_leads_to_wiped() -> None:
    targets = {target for (state, _), target in TRANSITIONS.items() if state is State.CONDEMNED}
    assert targets == {State.CONDEMNED, State.WIPED}


@pytest.mark.parametrize("ending", [Event.SHUTDOWN, Event.CONDEMN])
def test_a_restore_that_finishes_after_the_session_ended_changes_nothing(ending: Event) -> None:
    """Late news from a restore that was already running when shutdown or condemnation came."""
    for news in (Event.RESTORED, Event.VANISHED, Event.CONDEMN, Event.IDLE, Event.EXITED):
        lifecycle = Lifecycle()
        lifecycle.fire(Event.RESTORE)
        verdict = lifecycle.fire(ending)
        assert lifecycle.fire(news) is verdict
        assert not lifecycle.serving


def test_what_the_runtimes_end_means_in_each_state() -> None:
    ended = {}
    for state in State:
        lifecycle = Lifecycle(state)
        if state is State.DISPOSED:  # no runtime here to end
            assert not lifecycle.can(Event.EXITED)
            continue
        lifecycle.fire(Event.EXITED)
        ended[state] = (lifecycle.state, lifecycle.keeps_answers_on_exit, lifecycle.wipes_on_exit)
    assert ended == {
        State.RESTORING: (State.CLOSING, True, False),  # the restore failed: the next request retries
        State.LIVE: (State.CLOSING, True, False),  # a fault: the stored session is intact
        State.CLOSING: (State.CLOSING, True, False),  # disposed of when idle: the runtime's end is late news
        State.CONDEMNED: (State.CONDEMNED, False, True),
        State.WIPED: (State.WIPED, False, False),
        State.RESTARTING: (State.RESTARTING, True, False),
    }
    assert [state for state in State if Lifecycle(state).outlives_runtime] == [State.RESTARTING]


def test_only_a_disposed_session_restores_and_only_a_live_one_serves() -> None:
    assert [state for state in State if Lifecycle(state).needs_restore] == [State.DISPOSED]
    assert [state for state in State if Lifecycle(state).serving] == [State.LIVE]


def test_a_session_can_be_restored_used_and_condemned() -> None:
    lifecycle = Lifecycle()
    for event in (Event.RESTORE, Event.RESTORED, Event.EXITED):
        lifecycle.fire(event)
    assert lifecycle.waits_for_stop  # the next request restores it with a new handle once this one stopped
    lifecycle = Lifecycle()
    for event in (Event.RESTORE, Event.RESTORED, Event.CONDEMN):
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


def test_a_closing_handle_is_waited_for_and_restores_nothing() -> None:
    """The runtime's end (idle, fault, failed restore) and a listing's read leave the handle CLOSING: its file
    is open only until it closes, so a request waits for it to stop instead of restoring over it."""
    for events in ([Event.RESTORE, Event.RESTORED, Event.IDLE], [Event.RESTORE, Event.EXITED], [Event.PEEK]):
        lifecycle = Lifecycle()
        for event in events:
            lifecycle.fire(event)
        assert lifecycle.state is State.CLOSING
        assert lifecycle.waits_for_stop
        assert not lifecycle.needs_restore
        assert not lifecycle.serving
        assert lifecycle.keeps_answers_on_exit
        assert not lifecycle.keeps_executions_on_exit
        assert lifecycle.in_flight_refusal is Refusal.RESTARTING  # retry: the next request restores it
    assert [state for state in State if Lifecycle(state).waits_for_stop] == [State.CLOSING]


def test_a_shutdown_while_closing_keeps_the_handle_as_restarting() -> None:
    lifecycle = Lifecycle(State.CLOSING)
    assert lifecycle.fire(Event.SHUTDOWN) is State.RESTARTING
    assert lifecycle.outlives_runtime


def test_a_closing_handle_is_listed_as_disposed() -> None:
    assert listed_state(State.CLOSING, condemned=False) is State.DISPOSED
    assert listed_state(State.CLOSING, condemned=True) is State.CONDEMNED


def test_what_a_request_to_be_served_now_gets() -> None:
    """After waiting for a restore, or as a call starts on the runtime: served when live; the session's end when
    it is over here; an internal error when the runtime is not up (a failed restore, which is logged)."""
    refusals = {state: Lifecycle(state).service_refusal for state in State}
    assert refusals == {
        State.DISPOSED: Refusal.INTERNAL,
        State.RESTORING: Refusal.INTERNAL,
        State.LIVE: None,
        State.CLOSING: Refusal.INTERNAL,
        State.CONDEMNED: Refusal.SESSION_TERMINATED,
        State.WIPED: Refusal.SESSION_NOT_FOUND,
        State.RESTARTING: Refusal.RESTARTING,
    }


def test_condemnation_is_news_only_where_it_changes_the_state() -> None:
    news = [state for state in State if Lifecycle(state).changes_on(Event.CONDEMN)]
    assert news == [State.DISPOSED, State.RESTORING, State.LIVE]
    assert Lifecycle(State.CONDEMNED).can(Event.CONDEMN)  # late news, legal but no change


def test_the_process_drains_once_and_then_refuses_new_work() -> None:
    drain = Drain()
    assert (drain.phase, drain.draining, drain.refusal) == (Phase.SERVING, False, None)
    assert drain.fire(Event.SHUTDOWN) is Phase.DRAINING
    assert drain.draining
    assert drain.refusal is Refusal.RESTARTING
    assert drain.fire(Event.SHUTDOWN) is Phase.DRAINING  # a second shutdown is late news
    with pytest.raises(IllegalTransition):
        drain.fire(Event.RESTORE)
    assert set(PHASE_REFUSALS) == set(Phase)
