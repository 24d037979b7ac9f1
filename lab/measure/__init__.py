"""The measuring wing: clocks, timing, profiling and counting what Dynamo does, for any workload."""
