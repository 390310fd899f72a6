"""`edgeopt sweep` end to end: real builds of a tiny model, results, cache, resume, engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_head import local_ray_head

from conftest import assert_user_error
from edgeopt.bundle import verify_bundle
from edgeopt.sweep import SweepConfig, plan
from edgeopt.sweep_engine import longest_first


def _space(folder: Path, model: Path, data: Path, schemes=("w8a8", "float"),
           extra_models=()) -> Path:
    models = ", ".join(json.dumps(str(m)) for m in (model, *extra_models))
    path = folder / "sweep.toml"
    path.write_text(f"models = [{models}]\ndevices = [\"host-cpu\"]\n"
                    f"schemes = {json.dumps(list(schemes))}\n"
                    f"[build]\ncalib = {json.dumps(str(data))}\n")
    return path


def _sweep(run_cli, *args) -> dict:
    result = run_cli("sweep", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _point_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "points").glob("*.json"))}


@pytest.fixture
def broken_model(tmp_path) -> Path:
    path = tmp_path / "broken.keras"
    path.write_bytes(b"this is not a keras archive")
    return path


def test_a_sweep_builds_compares_picks_and_an_identical_rerun_builds_nothing(
        run_cli, tmp_path, tiny_keras_path, tiny_nhwc_data, broken_model):
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data, extra_models=[broken_model])
    out, best = tmp_path / "out", tmp_path / "best"
    record = _sweep(run_cli, space, "-o", out, "--write-best", best)
    assert (record["built"], record["cached"], record["failed"]) == (4, 0, 2)
    ok = [p for p in record["points"] if p["status"] == "ok"]
    failed = [p for p in record["points"] if p["status"] == "failed"]
    assert sorted(p["config"]["scheme"] for p in ok) == ["float", "w8a8"]
    assert all("broken.keras" in p["label"] and p["error"] for p in failed)  # the sweep went on
    for point in ok:
        f = point["figures"]
        assert f["metric"] == "top1_accuracy" and 0 <= f["quality"] <= 1
        assert f["outputs"][0]["name"] == "probs" and f["outputs"][0]["sqnr_db"] > 0
        assert f["latency_ms"] > 0 and f["basis"] and f["energy_mj"] > 0
        assert f["size_bytes"] == (out / "bundles" / point["key"] / "tiny.tflite").stat().st_size
        assert 0 <= f["delegated_share"] <= 1
        assert {"converting", "validating"} <= set(point["step_seconds"])
        assert sum(point["step_seconds"].values()) <= point["seconds"]
    front = record["fronts"]["host-cpu"]
    assert front and record["best"]["host-cpu"] in front
    assert len(_point_files(out)) == 4

    bundle = Path(record["best_bundles"]["host-cpu"])
    assert bundle == best / "host-cpu" and verify_bundle(bundle) == []
    assert 'output = "."' in (bundle / "edgeopt.toml").read_text()
    page = (out / "report.html").read_text()
    assert "<svg" in page and "Pareto front" in page and "<script" not in page
    assert "http" not in page.replace("http-equiv", "")
    assert all(p["label"] in page for p in record["points"])

    before = _point_files(out)
    again = _sweep(run_cli, space, "-o", out)
    assert (again["built"], again["cached"], again["failed"]) == (0, 4, 2)
    assert _point_files(out) == before  # nothing rebuilt, nothing rewritten
    assert again["best"] == record["best"]
    text = run_cli("sweep", space, "-o", out).stdout
    assert "best" in text and "top1_accuracy" in text and "0 built now, 4 from" in text

    retried = _sweep(run_cli, space, "-o", out, "--retry-failed")
    assert (retried["built"], retried["cached"], retried["failed"]) == (2, 2, 2)
    assert {k: v for k, v in _point_files(out).items()
            if json.loads(v)["status"] == "ok"} == \
        {k: v for k, v in before.items() if json.loads(v)["status"] == "ok"}


def test_an_unreachable_ray_address_is_one_error(run_cli, tmp_path, tiny_keras_path,
                                                 tiny_nhwc_data):
    pytest.importorskip("ray")
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data, schemes=["float"])
    result = run_cli("sweep", space, "-o", tmp_path / "out", "--ray", "127.0.0.1:9")
    assert_user_error(result, "cannot reach the Ray cluster at 127.0.0.1:9")
    assert not (tmp_path / "out").exists()


def test_a_folder_of_other_files_is_not_taken_for_results(run_cli, tmp_path, tiny_keras_path,
                                                         tiny_nhwc_data):
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data, schemes=["float"])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.html").write_text("my own page")
    result = run_cli("sweep", space, "-o", out)
    assert_user_error(result, "not a sweep's results")
    assert [p.name for p in out.iterdir()] == ["report.html"]
    assert (out / "report.html").read_text() == "my own page"


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_repeating_a_finished_candidate(
        run_cli, tmp_path, tiny_keras_path, tiny_nhwc_data):
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data, schemes=["w8a8", "float", "fp16"])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "edgeopt.cli", "sweep", str(space), "-o",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while not list((out / "points").glob("*.json")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before it was killed"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = _point_files(out)
    assert 1 <= len(finished) < 3
    record = _sweep(run_cli, space, "-o", out)
    assert record["cached"] == len(finished) and record["built"] == 3 - len(finished)
    after = _point_files(out)
    assert len(after) == 3 and all(after[name] == body for name, body in finished.items())
    assert all(p["status"] == "ok" for p in record["points"])


def _figures(record: dict) -> dict:
    return {p["key"]: {k: v for k, v in p["figures"].items()} for p in record["points"]}


@pytest.mark.slow
def test_a_process_pool_gives_the_serial_figures(run_cli, tmp_path, tiny_keras_path,
                                                 tiny_nhwc_data):
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data)
    serial = _sweep(run_cli, space, "-o", tmp_path / "serial")
    pool = _sweep(run_cli, space, "-o", tmp_path / "pool", "--workers", "2")
    assert pool["built"] == 2 and _figures(pool) == _figures(serial)
    assert len({p["worker"]["pid"] for p in pool["points"]} - {os.getpid()}) >= 1


RAY_TEMP = Path("/tmp") / f"edgeopt-ray-{os.getpid()}"  # Ray's socket paths must stay short


def _kill_a_running_candidate(killed: list, deadline: float) -> None:
    """SIGKILL the first Ray worker seen running a candidate (Ray titles it ray::NAME)."""
    import psutil

    while time.monotonic() < deadline and not killed:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if cmdline.startswith("ray::run_candidate"):
                time.sleep(1.0)  # well inside the build
                proc.kill()
                killed.append(proc.pid)
                return
        time.sleep(0.1)


@pytest.mark.slow
def test_ray_retries_a_killed_candidate_and_matches_the_local_run(
        run_cli, tmp_path, tiny_keras_path, tiny_nhwc_data):
    import threading

    pytest.importorskip("ray")
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data)
    local = _sweep(run_cli, space, "-o", tmp_path / "local")
    killed: list[int] = []
    with local_ray_head(RAY_TEMP) as address:
        killer = threading.Thread(target=_kill_a_running_candidate,
                                  args=(killed, time.monotonic() + 600))
        killer.start()
        record = _sweep(run_cli, space, "-o", tmp_path / "ray", "--ray", address)
        killer.join()
    assert killed, "no Ray worker was seen running a candidate"
    assert record["built"] == 2 and len(_point_files(tmp_path / "ray")) == 2
    assert all(p["status"] == "ok" for p in record["points"])
    assert killed[0] not in {p["worker"]["pid"] for p in record["points"]}  # it was run again
    assert _figures(record) == _figures(local)


def test_trials_go_with_an_optuna_search(run_cli, tmp_path, tiny_keras_path, tiny_nhwc_data):
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data, schemes=["float"])
    assert_user_error(run_cli("sweep", space, "-o", tmp_path / "out", "--trials", "3"),
                      "--trials N (N >= 1) goes with --search optuna")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_optuna_search_builds_at_most_its_trials(run_cli, tmp_path, tiny_keras_path,
                                                     tiny_nhwc_data):
    pytest.importorskip("optuna")
    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data,
                   schemes=["w8a8", "float", "fp16", "dynamic"])
    out = tmp_path / "out"
    record = _sweep(run_cli, space, "-o", out, "--search", "optuna", "--trials", "3")
    assert 1 <= record["built"] <= 3 and len(_point_files(out)) == record["built"]
    assert record["fronts"]["host-cpu"] and record["best"]["host-cpu"]
    again = _sweep(run_cli, space, "-o", out, "--search", "optuna", "--trials", "3")
    assert again["built"] == 0  # the same seed asks for the same candidates: all stored
    assert all(json.loads(v)["status"] == "ok" for v in _point_files(out).values())


def _kill_a_pool_worker(killed: list, deadline: float) -> None:
    """SIGKILL a spawned pool worker of this process once it has been working a while."""
    import psutil

    me = psutil.Process()
    while time.monotonic() < deadline and not killed:
        for proc in me.children(recursive=True):
            try:
                cmdline = " ".join(proc.cmdline())
                busy = sum(proc.cpu_times()[:2])
            except psutil.Error:
                continue
            # past the spawned interpreter's start-up, into the candidate's imports and build
            # (by CPU time, not age: a quiet machine finishes a tiny build in seconds)
            if "spawn_main" in cmdline and busy > 2.0:
                proc.kill()
                killed.append(proc.pid)
                return
        time.sleep(0.2)


@pytest.mark.slow
def test_a_pool_worker_killed_mid_candidate_is_retried(run_cli, tmp_path, tiny_keras_path,
                                                      tiny_nhwc_data):
    import threading

    space = _space(tmp_path, tiny_keras_path, tiny_nhwc_data)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_a_pool_worker, args=(killed, time.monotonic() + 600))
    killer.start()
    record = _sweep(run_cli, space, "-o", tmp_path / "out", "--workers", "2")
    killer.join()
    assert killed, "no pool worker was killed"
    assert record["built"] == 2 and len(_point_files(tmp_path / "out")) == 2
    assert all(p["status"] == "ok" for p in record["points"])
    assert killed[0] not in {p["worker"]["pid"] for p in record["points"]}


def test_a_pool_starts_the_long_candidates_first(tmp_path):
    samples = Path(__file__).resolve().parent.parent / "samples"
    space = tmp_path / "sweep.toml"
    space.write_text(f'models = ["{samples / "digits_cnn.keras"}"]\ndevices = ["host-cpu"]\n'
                     'schemes = ["float", "w8a8"]\nprune = [0, 0.5]\ndistill = [false, true]\n'
                     f'[build]\ncalib = "{samples / "digits_calib.npz"}"\n')
    jobs = list(plan(SweepConfig(str(space))).jobs)
    order = [(t.config["distill"], bool(t.config["prune"]), t.config["scheme"])
             for t, _ in longest_first(jobs)]
    assert order == [(True, True, "w8a8"), (True, True, "float"), (False, True, "w8a8"),
                     (False, True, "float"), (False, False, "w8a8"), (False, False, "float")]
    assert sorted(t.key for t, _ in longest_first(jobs)) == sorted(t.key for t, _ in jobs)
