"""Reproducible benchmarks. Each script prints a table whose rows carry a ratio against a baseline
measured in the same run on the same machine; absolute numbers are not comparable across runs."""
