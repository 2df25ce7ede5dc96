from tests.daemon import daemon  # noqa: F401  (fixture)
