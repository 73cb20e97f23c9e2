"""`recommend --ray` (basketgnn/workflow/ray_scoring.py) on a local Ray cluster of 2 CPUs: the
files one process writes, byte for byte; a rerun that keeps the complete parts; an actor killed
mid-part, restarted and its part retried; an actor that cannot load; the command line,
connecting to a cluster and starting its own; and the user errors (Ray missing, --ray with one
file or a shard, --ray-actors without --ray), which need no Ray.

An untrained fused checkpoint (tests/support/cli.py) of 60 customers, parts of 13: 5 parts.
About 1 minute on 2 cores, mostly Ray starting worker processes that import torch (an actor's
first part) and the two commands' own processes; the defaults' two actors run in `on_ray`."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from basketgnn.workflow.recommendations import MANIFEST, plan_parts, write_recommendation_parts
from tests.support.cli import make_checkpoint, run, run_ok

K, CHUNK, N_PARTS = 5, 13, 5
SOURCE = {"checkpoint": "test", "data": "test"}


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray cluster of 2 CPUs for the module, shut down at its end."""
    ray = pytest.importorskip("ray")
    # Ray's workers cannot import this test module (pytest put its folder on this process's
    # path only): its loaders travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(best.pt, its data folder, the data): an untrained DNNTSP fused with TIFU-KNN."""
    folder = tmp_path_factory.mktemp("ckpt")
    ckpt, _ = make_checkpoint(folder)
    from basketgnn.workflow.training import load_trained_with_data

    _, data, _, _ = load_trained_with_data(ckpt)
    return ckpt, folder / "data", data


@pytest.fixture(scope="module")
def one_process(checkpoint, tmp_path_factory) -> Path:
    """The dataset one process writes (the reference)."""
    from basketgnn.workflow import load_trained

    ckpt, _, data = checkpoint
    out = tmp_path_factory.mktemp("one") / "recs"
    write_recommendation_parts(load_trained(ckpt).with_threads(1), data, K, out, chunk=CHUNK, source=SOURCE)
    return out


@pytest.fixture(scope="module")
def cli_one_process(checkpoint, tmp_path_factory) -> Path:
    """The dataset `basketgnn recommend` writes in one process (its source: the checkpoint)."""
    out = tmp_path_factory.mktemp("cli") / "recs"
    run_ok("recommend", "--checkpoint", str(checkpoint[0]), "--out", str(out), "--k", str(K), "--chunk", str(CHUNK))
    return out


@pytest.fixture(scope="module")
def on_ray(ray_local, checkpoint, tmp_path_factory):
    """(the dataset written on Ray, what the call returned)."""
    from basketgnn.workflow.ray_scoring import CheckpointLoader, write_recommendation_parts_on_ray

    ckpt, data_path, data = checkpoint
    out = tmp_path_factory.mktemp("ray") / "recs"
    started = []
    done = write_recommendation_parts_on_ray(CheckpointLoader(str(ckpt), str(data_path)), plan(data, out),
                                             on_start=lambda parts, actors: started.append((parts, actors)))  # fmt: skip
    assert started == [(N_PARTS, 2)]  # the defaults: one actor per CPU of the cluster
    return out, done


def plan(data, folder: Path):
    """The run of every test here: top K in parts of CHUNK customers."""
    return plan_parts(data, K, folder, chunk=CHUNK, source=SOURCE)


def files(folder: Path) -> dict[str, bytes]:
    """Every part's bytes by name; fails on anything else but the manifest (temporaries)."""
    names = sorted(p.name for p in folder.iterdir())
    assert names == [MANIFEST] + [f"part-{i:05d}.parquet" for i in range(N_PARTS)], names
    return {n: (folder / n).read_bytes() for n in names if n != MANIFEST}


def manifest(folder: Path) -> dict:
    import json

    return {k: v for k, v in json.loads((folder / MANIFEST).read_text()).items() if k != "created"}


def test_ray_writes_the_one_process_files_byte_for_byte(one_process, on_ray):
    out, done = on_ray
    assert (done.written, done.skipped, done.manifest) == (N_PARTS, 0, out / MANIFEST)
    assert files(out) == files(one_process)
    assert manifest(out) == manifest(one_process)


def test_a_re_ranked_checkpoint_on_ray_writes_the_one_process_files(ray_local, tmp_path):
    """The default's checkpoint where validation kept the re-ranking stage: the actors load the
    stage with the model and rank as one process does."""
    from basketgnn.recommenders.reranked import RerankedRecommender
    from basketgnn.workflow import load_trained
    from basketgnn.workflow.ray_scoring import CheckpointLoader, write_recommendation_parts_on_ray
    from basketgnn.workflow.training import load_trained_with_data

    (tmp_path / "ckpt").mkdir()
    ckpt, _ = make_checkpoint(tmp_path / "ckpt", rerank=True)
    _, data, _, _ = load_trained_with_data(ckpt)
    assert isinstance(load_trained(ckpt), RerankedRecommender)
    one = tmp_path / "one"
    write_recommendation_parts(load_trained(ckpt).with_threads(1), data, K, one, chunk=CHUNK, source=SOURCE)
    done = write_recommendation_parts_on_ray(CheckpointLoader(str(ckpt), str(tmp_path / "ckpt" / "data")),
                                             plan(data, tmp_path / "ray"))  # fmt: skip
    assert done.written == N_PARTS and files(tmp_path / "ray") == files(one)


def test_a_rerun_keeps_the_complete_parts_and_writes_the_missing_one(on_ray, checkpoint, tmp_path):
    from basketgnn.workflow.ray_scoring import CheckpointLoader, write_recommendation_parts_on_ray

    ckpt, data_path, data = checkpoint
    out = tmp_path / "recs"
    shutil.copytree(on_ray[0], out)
    want = files(out)
    (out / "part-00002.parquet").unlink()
    (out / MANIFEST).unlink()
    (out / ".part-00002.parquet.abc.tmp").write_text("left by a killed actor")
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")}
    done = write_recommendation_parts_on_ray(CheckpointLoader(str(ckpt), str(data_path)), plan(data, out))
    assert (done.written, done.skipped) == (1, N_PARTS - 1)
    assert all((out / n).stat().st_mtime_ns == t for n, t in before.items())  # kept, not rewritten
    assert files(out) == want and (out / MANIFEST).is_file()

    again = write_recommendation_parts_on_ray(CheckpointLoader(str(ckpt), str(data_path)), plan(data, out))
    assert (again.written, again.skipped) == (0, N_PARTS)  # no actor started


@dataclass(frozen=True)
class DiesOnItsFirstPart:
    """A loader whose actor process exits (os._exit, as a killed process would) while writing
    its first part, once in the whole run (the first to create ``marker``); Ray restarts it."""

    inner: object
    marker: str

    def __call__(self):
        import basketgnn.workflow.recommendations as writer

        real = writer.rank_items

        def rank_items(*args, **kwargs):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return real(*args, **kwargs)
            os._exit(1)  # mid-part: its temporary file is open, nothing renamed

        writer.rank_items = rank_items
        return self.inner()


def test_an_actor_killed_mid_part_is_restarted_and_the_dataset_is_whole(ray_local, checkpoint, one_process, tmp_path):
    from basketgnn.workflow.ray_scoring import CheckpointLoader, write_recommendation_parts_on_ray

    ckpt, data_path, data = checkpoint
    marker = tmp_path / "died"
    load = DiesOnItsFirstPart(CheckpointLoader(str(ckpt), str(data_path)), str(marker))
    done = write_recommendation_parts_on_ray(load, plan(data, tmp_path / "recs"), actors=1)
    assert marker.exists()  # an actor died
    assert done.written == N_PARTS
    assert files(tmp_path / "recs") == files(one_process)  # no temporary left, every part whole


def test_an_actor_that_cannot_load_stops_with_one_message(ray_local, checkpoint, tmp_path):
    from basketgnn.errors import UserError
    from basketgnn.workflow.ray_scoring import CheckpointLoader, write_recommendation_parts_on_ray

    ckpt, _, data = checkpoint
    other, _ = make_checkpoint(tmp_path, n_customers=30)  # another data set beside the checkpoint
    with pytest.raises(UserError, match="^the data loaded here differs from the data the run"):
        write_recommendation_parts_on_ray(CheckpointLoader(str(ckpt), str(tmp_path / "data")), plan(data, tmp_path / "recs"),
                                          actors=1)  # fmt: skip
    assert not list((tmp_path / "recs").glob("part-*"))


# --- the command line -------------------------------------------------------------------------


def test_recommend_ray_connects_to_a_cluster(ray_local, checkpoint, cli_one_process, tmp_path):
    """`basketgnn recommend --ray ADDRESS` in a process of its own, as on a real cluster."""
    ckpt, data_path, _ = checkpoint
    address = ray_local.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-m", "basketgnn", "recommend", "--checkpoint", str(ckpt),
                           "--out", str(tmp_path / "recs"), "--k", str(K), "--chunk", str(CHUNK),
                           "--ray", address, "--ray-actors", "1"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scoring 5 part(s)" in done.stdout and "on 1 Ray actor(s), 1 CPU(s) each" in done.stdout
    assert f"({N_PARTS} written, 0 already complete), {K * 60:,} rows for 60 customers" in done.stdout
    assert files(tmp_path / "recs") == files(cli_one_process)
    assert manifest(tmp_path / "recs") == manifest(cli_one_process)


def test_recommend_ray_starts_a_local_cluster(checkpoint, cli_one_process, tmp_path):
    """`basketgnn recommend --ray` (no address, before another option): a new local cluster,
    shut down when the command ends."""
    pytest.importorskip("ray")
    ckpt, _, _ = checkpoint
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-m", "basketgnn", "recommend", "--checkpoint", str(ckpt),
                           "--ray", "--out", str(tmp_path / "recs"), "--k", str(K), "--chunk", str(CHUNK),
                           "--ray-actors", "1"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "complete:" in done.stdout
    assert files(tmp_path / "recs") == files(cli_one_process)


def test_ray_missing_is_one_message_and_exit_2(monkeypatch, capsys, checkpoint, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    ckpt, _, _ = checkpoint
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(ckpt), "--out", str(tmp_path / "r"), "--ray")
    assert code == 2 and "Traceback" not in err
    assert "pip install 'basketgnn[ray]'" in " ".join(err.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "recs.parquet", "--ray"], "--ray writes a partitioned dataset, which needs a folder"),
        (["--out", "recs", "--ray", "--shard", "0/2"], "--ray scores every part itself, not shard 0/2"),
        (["--out", "recs", "--ray-actors", "2"], "--ray-actors is the number of Ray actors of --ray"),
    ],
)
def test_ray_with_one_file_a_shard_or_actors_alone_is_exit_2(monkeypatch, capsys, checkpoint, tmp_path, args, message):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(monkeypatch, capsys, "recommend", "--checkpoint", str(checkpoint[0]), *args)
    assert code == 2 and message in " ".join(err.split())
    assert list(tmp_path.iterdir()) == []


def test_ray_without_an_address_means_a_local_cluster():
    from basketgnn.cli.predict import fill_ray_address

    assert fill_ray_address(["recommend", "--ray"]) == ["recommend", "--ray", "local"]
    assert fill_ray_address(["--ray", "--out", "d"]) == ["--ray", "local", "--out", "d"]
    assert fill_ray_address(["--ray", "auto", "--out", "d"]) == ["--ray", "auto", "--out", "d"]
    assert fill_ray_address(["--out", "d"]) == ["--out", "d"]
