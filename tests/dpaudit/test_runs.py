"""Finding a run by MLflow id: the run verified is the run asked for, and no URI's password is ever printed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from dpaudit.cli import main
from dpaudit.errors import InvalidParameter
from dpaudit.runs import locate_run
from dpaudit.tracking import resolve_tracking_uri

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SADeprecationWarning")  # MLflow's own

RUN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def two_runs(make_session):
    """Two closed, mirrored runs A (ε = 5) and B (ε = 0.1) signed by the same key, and the MLflow client."""
    runs = []
    for name, epsilon in (("A", 5.0), ("B", 0.1)):
        s = make_session(epsilon, mirror=True, name=name)
        s.laplace(1.0, sensitivity=1.0, epsilon=0.05)
        s.close()
        runs.append(s)
    return runs[0], runs[1], MlflowClient(resolve_tracking_uri(None))


def _tagged(client: MlflowClient, run_id: str):
    experiment = client.get_experiment_by_name("dpaudit")
    return client.search_runs([experiment.experiment_id], f"tags.`dpaudit.run_id` = '{run_id}'")


def _plant(client: MlflowClient, claimed_run_id: str, bundle) -> str:
    """What any user who may edit the experiment can do: a run tagged with another run's id, holding ``bundle``."""
    experiment = client.get_experiment_by_name("dpaudit")
    planted = client.create_run(experiment.experiment_id, start_time=1, tags={"dpaudit.run_id": claimed_run_id})
    client.log_artifacts(planted.info.run_id, str(bundle))
    return planted.info.run_id


def _verify(run: str, fingerprint: str, tmp_path, *extra: str):
    return CliRunner().invoke(main, ["--store", str(tmp_path / "elsewhere"), "verify", run, "--trusted-key",
                                     fingerprint, "--allow-not-for-release", "--json", *extra])


def test_verify_by_id_fails_on_another_runs_bundle_under_the_requested_id(two_runs, tmp_path):
    """The genuine run A is deleted from MLflow and a run tagged with A's id holds B's valid, signed bundle: asked
    for A (by its dpaudit id, or by the planted run's MLflow id, which claims A), verify fails on `requested-run`.
    Before this change it said VALID and certified B's ε under A's name."""
    a, b, client = two_runs
    genuine = _tagged(client, a.run_id)[0].info.run_id
    assert json.loads(_verify(a.run_id, a.key_fingerprint, tmp_path).stdout)["valid"] is True
    assert json.loads(_verify(genuine, a.key_fingerprint, tmp_path).stdout)["valid"] is True
    client.delete_run(genuine)
    planted = _plant(client, a.run_id, b.run_dir)
    assert locate_run(a.run_id, store=tmp_path / "elsewhere").run_id == a.run_id
    for asked in (a.run_id, planted):
        result = _verify(asked, a.key_fingerprint, tmp_path)
        assert result.exit_code == 1, result.output
        report = json.loads(result.stdout)
        assert report["valid"] is False
        failed = {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}
        assert set(failed) == {"requested-run"}  # B's bundle is otherwise whole and validly signed
        assert f"asked to verify run '{a.run_id}'" in failed["requested-run"] and b.run_id in failed["requested-run"]


def test_verify_refuses_to_choose_between_two_runs_tagged_with_the_requested_id(two_runs, tmp_path):
    """The attack of the reviewer's script: a second run tagged with A's id and an earlier start time. The oldest
    used to be chosen; now verify names the two runs and stops (usage error, exit 2)."""
    a, b, client = two_runs
    planted = _plant(client, a.run_id, b.run_dir)
    result = _verify(a.run_id, a.key_fingerprint, tmp_path)
    assert result.exit_code == 2, result.output
    assert "more than one MLflow run" in result.output and planted in result.output
    assert "VALID" not in result.output


@pytest.mark.parametrize(("uri", "expected"), [
    ("http://alice:S3cretPW@127.0.0.1:9/", "holds credentials"),  # refused by dpaudit before any request
    ("ftp://alice:S3cretPW@127.0.0.1:9/x", "ftp://***@127.0.0.1:9/x"),  # MLflow's own error echoes the URI
])
def test_no_uri_password_is_printed(uri, expected, tmp_path):
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "runs"), "--tracking-uri", uri, "verify", RUN])
    assert result.exit_code == 2
    assert expected in result.output
    assert "S3cretPW" not in result.output


def test_a_refused_tracking_uri_propagates_as_invalid_parameter(tmp_path):
    with pytest.raises(InvalidParameter, match="holds credentials") as refused:
        locate_run(RUN, store=tmp_path / "runs", tracking_uri="http://alice:S3cretPW@127.0.0.1:9/")
    assert "S3cretPW" not in str(refused.value)


def test_verify_bundle_checks_the_requested_run_id(make_session):
    from dpaudit.verify import verify_bundle

    s = make_session()
    s.close()
    checks = {c.name: c for c in verify_bundle(s.run_dir, allow_not_for_release=True, run_id=s.run_id).checks}
    assert checks["requested-run"].ok
    other = verify_bundle(s.run_dir, allow_not_for_release=True, run_id="f" * 32)
    assert not other.valid and [r.split(":")[0] for r in other.reasons] == ["requested-run"]
    assert "requested-run" not in {c.name for c in verify_bundle(s.run_dir, allow_not_for_release=True).checks}
