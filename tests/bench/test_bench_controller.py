"""The pure parts of `lahar bench controller` and `lahar bench volcano_examples` (the runs
themselves start a whole `lahar up`: they are benchmarks, run by hand, figures in the docs)."""

from __future__ import annotations

import os
from pathlib import Path

from lahar.api import admission, kinds
from lahar.bench.controller import bench_job, cpu_seconds
from lahar.bench.volcano_examples import Outcome, volcano_manifests


def test_the_bench_job_passes_admission_and_is_one_gang() -> None:
    job = admission.apply_defaults(kinds.JOB, {**bench_job(7, 10)})
    job["metadata"]["namespace"] = "default"  # the bench creates it there
    admission.validate(kinds.JOB, job)
    assert job["metadata"]["name"] == "bench-00007"
    assert job["spec"]["minAvailable"] == 10 and job["spec"]["tasks"][0]["replicas"] == 10


def test_cpu_seconds_reads_a_process_from_proc() -> None:
    busy = sum(i * i for i in range(200_000))
    assert busy > 0 and cpu_seconds(os.getpid()) > 0


def test_volcano_manifests_are_volcanos_apis_only_queues_first(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "job.yaml").write_text("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n")
    (tmp_path / "z-queues.yaml").write_text(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n---\n"
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: r}\n"
    )
    (tmp_path / "rs.yaml").write_text("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: n}\n")
    (tmp_path / "broken.yaml").write_text("a: [")
    found = [(path.name, [d["kind"] for d in docs]) for path, docs in volcano_manifests(tmp_path)]
    assert found == [("z-queues.yaml", ["Queue", "Queue"]), ("job.yaml", ["Job"])]
    row = Outcome("example/x.yaml", "Job", "refused", "a | b").row()
    assert row == "| `example/x.yaml` | Job | refused | a \\| b |"
