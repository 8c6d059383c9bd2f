"""The staged recipe (python/anvil/rl/configs/, python -m anvil.rl.train): each stage's config is
composed as veRL composes its own and passes veRL's own validation with the paper's numbers in it;
the data sets anvil.rl.data makes are what the agent loop reads; the SFT stage's data set class
serves `anvil rft`'s rows through veRL's own loader; what is wrong is said by key or file."""
import json
import os
import subprocess
import sys

import pytest



from anvil.rl import data, local_checkpoint, sft_data, train  # noqa: E402
from conftest import local_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = os.path.join(ROOT, "examples", "tasks")


@pytest.fixture(scope="module")
def checkpoint():
    return local_checkpoint.make_checkpoint(local_gguf(), weights=False)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("sets")
    train_set, val_set = str(d / "train.parquet"), str(d / "val.parquet")
    assert data.main([TASKS, "--out", train_set]) == 0
    assert data.main([TASKS, "--out", val_set, "--split", "eval", "--protocol", "kernelbench"]) == 0
    return train_set, val_set


def ppo_overrides(checkpoint, sets, **more):
    o = {"actor_rollout_ref.model.path": checkpoint, "data.train_files": sets[0], "data.val_files": sets[1]}
    o.update(more)
    return ["%s=%s" % kv for kv in o.items()]


PAPER = {"stage1_warmup": (150, 0, 32768, 1), "stage3_value": (20, 21, 131072, None),
         "stage4_agentic": (170, 0, 131072, None), "ablation_no_rft": (150, 0, 131072, None),
         "ablation_no_value_pretraining": (150, 0, 131072, None)}


@pytest.mark.parametrize("stage", sorted(PAPER))
def test_each_ppo_stage_is_the_papers_and_veRL_accepts_it(stage, checkpoint, sets):
    more = {"trainer.resume_from_path": "/tmp/stage3/global_step_20"} if stage == "stage4_agentic" else {}
    cfg, lines = train.check(stage, ppo_overrides(checkpoint, sets, **more))
    steps, warmup, context, turns = PAPER[stage]
    a, r, alg = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.28)
    assert (a.optim.lr, cfg.critic.optim.lr) == (3e-6, 6e-6)
    assert cfg.data.train_batch_size == 1024
    assert (alg.adv_estimator, alg.gamma, alg.lam) == ("gae", 1.0, 0.95)
    assert (cfg.trainer.total_training_steps, cfg.trainer.critic_warmup) == (steps, warmup)
    assert r.prompt_length + r.response_length == context
    assert (cfg.get("anvil") or {}).get("max_turns") == turns
    # the sampler's log-probabilities go to veRL's rollout correction
    assert r.calculate_log_probs is True and alg.rollout_correction.rollout_is == "token"
    assert r.agent.agent_loop_config_path == train.LOOPS and r.agent.default_agent_loop == "anvil_agent"
    assert cfg.critic.model.path == checkpoint
    assert lines[0].startswith(stage + ": PPO (gae)")


def test_the_ablations_differ_from_stage4_where_the_paper_says(checkpoint, sets):
    full, _ = train.check("stage4_agentic", ppo_overrides(checkpoint, sets, **{
        "trainer.resume_from_path": "/tmp/stage3/global_step_20"}))
    no_value, _ = train.check("ablation_no_value_pretraining", ppo_overrides(checkpoint, sets))
    assert full.trainer.resume_mode == "resume_path" and no_value.trainer.resume_mode == "auto"
    assert no_value.trainer.critic_warmup == 0


def test_the_loops_settings_are_overridden_by_key_and_reach_rays_workers(checkpoint, sets, monkeypatch):
    cfg, _ = train.check("stage4_agentic", ppo_overrides(checkpoint, sets, **{
        "trainer.resume_from_path": "/tmp/stage3/global_step_20", "anvil.url": "http://judge:8571",
        "anvil.token_env": "MY_TOKEN", "anvil.max_turns": 7}))
    from anvil.rl import verl_loop
    s = verl_loop.settings_of({"max_tokens_per_turn": 100}, cfg.anvil)
    assert (s["url"], s["token_env"], s["max_turns"], s["max_tokens_per_turn"]) == ("http://judge:8571", "MY_TOKEN", 7, 100)
    monkeypatch.setenv("ANVIL_SERVE_URL", "http://judge:8571")
    monkeypatch.setenv("MY_TOKEN", "s3cret")
    monkeypatch.delenv("ANVIL_SERVE_TOKEN", raising=False)
    assert train.anvil_env(cfg) == {"ANVIL_SERVE_URL": "http://judge:8571", "MY_TOKEN": "s3cret"}
    # on a real (local) Ray, as veRL's run_ppo would start it: the workers see them
    import ray
    cfg.ray_kwargs.ray_init.num_cpus = 1
    train.init_ray(cfg)
    try:
        @ray.remote(num_cpus=0)
        def seen():
            import os
            return os.environ.get("ANVIL_SERVE_URL"), os.environ.get("MY_TOKEN"), os.environ.get("TOKENIZERS_PARALLELISM")
        assert ray.get(seen.remote()) == ("http://judge:8571", "s3cret", "true")
    finally:
        ray.shutdown()


def test_the_data_rows_are_what_the_loop_reads(sets):
    import pyarrow.parquet as pq
    from anvil.rl.verl_loop import task_of
    train_rows, val_rows = (pq.read_table(s).to_pylist() for s in sets)
    assert len(train_rows) == len(val_rows) == len([f for f in os.listdir(TASKS) if f.endswith(".py")])
    for i, row in enumerate(train_rows):
        assert row["agent_name"] == "anvil_agent" and row["prompt"][0]["role"] == "user"
        anvil = task_of(row["extra_info"], i)
        name = row["extra_info"]["name"]
        assert anvil["task"] == {"source": open(os.path.join(TASKS, name)).read(), "name": name}
        assert anvil["max_turns"] is None and anvil["options"] == {}
    assert {task_of(r["extra_info"])["max_turns"] for r in val_rows} == {200}
    assert {task_of(r["extra_info"])["options"]["protocol"] for r in val_rows} == {"kernelbench"}


def test_what_is_missing_or_wrong_is_said_by_key_or_file(checkpoint, sets, tmp_path):
    with pytest.raises(train.RecipeError, match=r"not set: actor_rollout_ref.model.path, data.train_files"):
        train.check("stage4_agentic", [])
    with pytest.raises(train.RecipeError, match=r"data.train_files: /nowhere/t.parquet: no such file"):
        train.check("stage1_warmup", ppo_overrides(checkpoint, sets, **{"data.train_files": "/nowhere/t.parquet"}))
    with pytest.raises(train.RecipeError, match=r"actor_rollout_ref.model.path: /nowhere/m: no such directory"):
        train.check("stage1_warmup", ppo_overrides("/nowhere/m", sets))
    with pytest.raises(train.RecipeError, match=r"nope: no such stage"):
        train.check("nope")
    bad = tmp_path / "bad.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist([{"prompt": [{"role": "user", "content": "x"}],
                                          "extra_info": {"index": 0, "anvil": {"task": {"url": "x"}}}}]), str(bad))
    with pytest.raises(train.RecipeError, match=r"row 0 of .*bad.parquet: extra_info.anvil.task must be"):
        train.check("stage1_warmup", ppo_overrides(checkpoint, sets, **{"data.train_files": str(bad)}))
    with pytest.raises(train.RecipeError, match=r"veRL refuses the config: AssertionError: real_train_batch_size "
                                                r"\(100\) must be divisible by minimal possible batch size \(128\)"):
        train.check("stage1_warmup", ppo_overrides(checkpoint, sets, **{
            "data.train_batch_size": 100, "actor_rollout_ref.actor.use_dynamic_bsz": False}))
    with pytest.raises(train.RecipeError, match=r"anvil_agent: the config's anvil section has unknown settings maxturns"):
        train.check("stage1_warmup", ppo_overrides(checkpoint, sets, **{"+anvil.maxturns": 3}))


def test_the_command_line_says_what_is_wrong_and_writes_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-m", "anvil.rl.train", "stage4_agentic", "--dry-run"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1 and "anvil.rl.train: not set: actor_rollout_ref.model.path" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "anvil.rl.data", str(tmp_path / "none"), "--out", str(tmp_path / "o.parquet")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1 and "no such file or folder" in p.stderr and not os.listdir(tmp_path)


def rft_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def test_the_sft_stage_reads_rft_rows_through_veRLs_loader(checkpoint, tmp_path):
    rows = [{"id": "a/sample-0", "input_ids": [2, 105, 2364, 107, 5, 6, 106], "loss_mask": [0, 0, 0, 0, 1, 1, 1]},
            {"id": "c/sample-1", "input_ids": None, "messages": []},  # chat-mode: left out
            {"id": "b/sample-0", "input_ids": [2, 7, 8, 106], "loss_mask": [0, 1, 1, 1]}]
    path = rft_rows(tmp_path / "rft.jsonl", rows)
    cfg, lines = train.check("stage2_rft", ["model.path=%s" % checkpoint, "data.train_files=%s" % path])
    from verl.trainer.sft_trainer import create_sft_dataset
    ds = create_sft_dataset([path], cfg.data, None, None)
    assert isinstance(ds, sft_data.TokenSFTDataset) and len(ds) == 2 and ds.chat_rows == 1
    item = ds[0]
    assert item["input_ids"].tolist() == rows[0]["input_ids"] and item["loss_mask"].tolist() == rows[0]["loss_mask"]
    assert item["position_ids"].tolist() == list(range(7))
    assert lines[0].startswith("stage2_rft: SFT on")


def test_rft_rows_that_cannot_train_are_refused_by_row(checkpoint, tmp_path):
    chat = rft_rows(tmp_path / "chat.jsonl", [{"id": "c/sample-1", "input_ids": None, "messages": []}])
    with pytest.raises(train.RecipeError, match=r"chat.jsonl: no row has token ids"):
        train.check("stage2_rft", ["model.path=%s" % checkpoint, "data.train_files=%s" % chat])
    off = rft_rows(tmp_path / "off.jsonl", [{"id": "d", "input_ids": [1, 2], "loss_mask": [1]}])
    with pytest.raises(train.RecipeError, match=r"off.jsonl row 0 \(d\): loss_mask must be one 0 or 1 per input id"):
        train.check("stage2_rft", ["model.path=%s" % checkpoint, "data.train_files=%s" % off])
    long = rft_rows(tmp_path / "long.jsonl", [{"id": "e", "input_ids": [1] * 20, "loss_mask": [1] * 20}])
    with pytest.raises(train.RecipeError, match=r"long.jsonl row 0 \(e\): 20 tokens, over data.max_length 8"):
        train.check("stage2_rft", ["model.path=%s" % checkpoint, "data.train_files=%s" % long, "data.max_length=8"])
