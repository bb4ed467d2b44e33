"""The benchmark workload written the idiomatic way in each framework (one script each)."""
