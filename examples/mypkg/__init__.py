"""An example user package: a workload perflab measures without being part of it."""
