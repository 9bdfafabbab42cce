"""Fixtures shared by tests and benchmarks: TPC-H data, result comparison, in-process clusters."""
