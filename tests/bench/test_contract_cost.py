"""What building the contract's checks costs a replay: counted in the step's own process, each check once."""

from bench import contract_cost


def test_a_replay_counts_the_checks_it_made_and_its_own_cpu():
    checks, cpu = contract_cost.measure(["s01_agent_loop"])["s01_agent_loop"]
    assert 0 < checks < cpu  # s01's replay makes at least the request's and the message's checks
    line = contract_cost.report({"s01_agent_loop": (checks, cpu)})[1]
    assert line.startswith("s01_agent_loop") and line.endswith(f"{checks / cpu:.1%}")


def test_a_share_is_given_as_the_checks_over_the_replay():
    line = contract_cost.report({"s06_recovery": (0.075, 1.5)})[1]
    assert "75 ms" in line and "1500 ms" in line and line.endswith("5.0%")
