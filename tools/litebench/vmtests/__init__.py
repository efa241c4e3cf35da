"""The integration tests on a virtual cluster (tools/vmtest.py), run by pytest.

    cli          vmtest.py's command line: the suite and kernel as pytest's markers, pytest.main
    suites       the suites as markers, the order of the modules, each suite's cluster
    conftest     the options, the cluster fixture `c`, the fence check after every test
    report       what vmtest.py prints: a line per test, the run's checks, `N passed, N failed`
    harness      what the tests share: TestFailed, check, pings, state checks, console tails
    join         the set-up steps: two nodes join, a third boots late (also the soak's)
    bringup, lmr, reach, rpc, apps, qos, link, class_change, hostile, membership, final
                 the tests by area, in the order they run
"""
