"""Workload controllers for single-machine mode (`lahar up`): Deployment and ReplicaSet, one file per kind."""
