"""The differential kubectl battery (battery.py) runs: on the embedded server always, and against
a real kube-apiserver too (e2e), where it prints the table of differences. A difference must be
an intended one (battery.INTENDED, with its reason); an unexplained one fails, as does a battery
that cannot run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.kubectl_battery.battery import Session, compare, normalise, reason, report, run_session, steps

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@needs_kubectl
def test_the_battery_runs_on_the_embedded_server(module_apiserver, tmp_path: Path):
    assert KUBECTL is not None
    session = Session()
    outcomes = run_session(KUBECTL, module_apiserver.kubeconfig(tmp_path / "kubeconfig"), session)
    by_name = {outcome.step.name: outcome for outcome in outcomes}
    assert len(by_name) == len(steps(session))
    # The session itself works: what it creates, it finds, changes and deletes.
    for name in ("apply namespace", "apply configmap", "apply pod", "apply vcjob", "apply queue", "delete namespace"):
        assert by_name[name].returncode == 0, by_name[name].text
    assert by_name["get podgroup minMember"].stdout == "4"
    assert "MODIFIED" in by_name["watch configmaps"].stdout
    assert session.namespace not in "".join(o.text for o in outcomes), "names are normalised"


def test_normalising_hides_what_differs_by_nature():
    session = Session(suffix="abc123")
    text = (
        "uid: 0f8fad5b-d9cb-469f-a165-70867728950e\n"
        'creationTimestamp: "2026-11-24T19:30:55Z"\n'
        'resourceVersion: "4711"\n'
        "  Resource Version:  12\n"
        "Start Time:  Tue, 24 Nov 2026 19:30:55 +0000\n"
        "kb-abc123   Active   5m3s\n"
        "server https://127.0.0.1:6443 refused\n"
        "  nested:\n"
        "    key: value"
    )
    assert normalise(text, session).splitlines() == [
        "uid: <uid>",
        'creationTimestamp: "<time>"',
        "resourceVersion: <rv>",
        "  Resource Version:  <rv>",
        "Start Time:  <time>",
        "<ns>  Active  <age>",
        "server <server> refused",
        "  nested:",
        "    key: value",
    ]


@pytest.mark.e2e
@needs_kubectl
def test_the_battery_compares_the_embedded_server_with_kube_apiserver(
    module_apiserver, lahar_admin_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert KUBECTL is not None
    session = Session()
    embedded = run_session(KUBECTL, module_apiserver.kubeconfig(tmp_path / "kubeconfig"), session)
    real = run_session(KUBECTL, lahar_admin_kubeconfig, session)
    same, different = compare(embedded, real)
    assert len(same) + len(different) == len(steps(session))
    # The real server is the oracle: the session must work there.
    real_by_name = {outcome.step.name: outcome for outcome in real}
    for name in ("apply namespace", "apply deployment", "apply vcjob", "get podgroup minMember"):
        assert real_by_name[name].returncode == 0, real_by_name[name].text
    with capsys.disabled():
        print("\n" + report(same, different, "kubectl", "kube-apiserver"))
    unexplained = [d.step for d in different if not reason(d.step)]
    assert not unexplained, f"differences with no reason in battery.INTENDED: {unexplained}"
