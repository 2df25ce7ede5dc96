from tests.daemon import daemon  # noqa: F401  (fixture: a gatewayd on faux/echo with the test's home)
