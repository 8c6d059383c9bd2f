"""anvil's staged recipe on veRL (docs/rl.md): one stage's config checked, then trained.

    python -m anvil.rl.train STAGE [--dry-run] [KEY=VALUE ...]

STAGE is a file of configs/ (stage1_warmup, stage2_rft, stage3_value, stage4_agentic,
ablation_no_rft, ablation_no_value_pretraining) or a path to a YAML file of one's own that starts
from anvil_ppo; KEY=VALUE are hydra overrides (actor_rollout_ref.model.path=..., data.train_files=...,
anvil.url=...). The config is composed as veRL's own entry points compose theirs (ppo_trainer,
sft_trainer_engine), anvil's agent loop file is filled in, and then checked:

  - every mandatory value is set (`<required>` in the stage files: the model, the data sets, the run's
    name; and veRL's own `???`);
  - the data sets and a local model path exist, and each row of the training set says an anvil task
    (extra_info.anvil.task; the SFT stage's rows: token ids and loss masks);
  - veRL's own validation (verl.utils.config.validate_config: batch sizes against the GPUs, the
    actor's and critic's settings) and its typed configs (the algorithm, actor, critic, rollout);
  - the agent loop's settings (the config's `anvil:` section) and its class import.

--dry-run stops there (exit 0, a summary of the recipe's numbers); otherwise the PPO stages run
veRL's PPO entry (verl.trainer.main_ppo.run_ppo: Ray, the v1 trainer) and the SFT stage veRL's SFT
trainer (run it under torchrun). A check that fails names the key or file and exits 1; nothing is
started.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "configs")
LOOPS = os.path.join(CONFIGS, "agent_loops.yaml")
STAGES = ("stage1_warmup", "stage2_rft", "stage3_value", "stage4_agentic", "ablation_no_rft",
          "ablation_no_value_pretraining")


class RecipeError(Exception):
    pass


def compose(stage, overrides=()):
    """The stage's whole config, as hydra composes it (the stage's folder first, veRL's after)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    path = stage if stage.endswith((".yaml", ".yml")) else os.path.join(CONFIGS, stage + ".yaml")
    if not os.path.isfile(path):
        raise RecipeError("%s: no such stage (the stages: %s)" % (stage, ", ".join(STAGES)))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=os.path.dirname(os.path.abspath(path)), version_base=None):
            cfg = hydra_compose(config_name=os.path.splitext(os.path.basename(path))[0], overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise RecipeError("%s: %s" % (path, e))
    if is_ppo(cfg) and not cfg.actor_rollout_ref.rollout.agent.get("agent_loop_config_path"):
        cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = LOOPS
    return cfg


def is_ppo(cfg):
    return "actor_rollout_ref" in cfg


REQUIRED = "<required>"  # what a stage file says of a value the command line must give (hydra's ??? does
                        # not override a value veRL's defaults have)


def required_keys(node, prefix=""):
    if isinstance(node, dict):
        return [k for key, v in node.items() for k in required_keys(v, "%s%s." % (prefix, key))]
    return [prefix[:-1]] if node == REQUIRED else []


def check_missing(cfg):
    from omegaconf import OmegaConf
    missing = sorted(set(required_keys(OmegaConf.to_container(cfg, resolve=False))) | set(OmegaConf.missing_keys(cfg)))
    if missing:
        raise RecipeError("not set: %s (give KEY=VALUE on the command line)" % ", ".join(missing))
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001 - omegaconf's interpolation errors
        raise RecipeError("the config does not resolve: %s" % e)


def files_of(value, key):
    files = [value] if isinstance(value, str) else list(value or [])
    if not files:
        raise RecipeError("%s: no data set given" % key)
    for f in files:
        if not os.path.isfile(os.path.expanduser(f)):
            raise RecipeError("%s: %s: no such file" % (key, f))
    return [os.path.expanduser(f) for f in files]


def check_model(path, key):
    local = path.startswith(("/", ".", "~"))
    if local and not os.path.isdir(os.path.expanduser(path)):
        raise RecipeError("%s: %s: no such directory (a Hugging Face model's)" % (key, path))


def check_task_rows(files):
    """Each training row names an anvil task (what the agent loop will ask the server for)."""
    import pyarrow.parquet as pq
    from anvil.rl.verl_loop import TaskRowError, task_of
    for f in files:
        try:
            table = pq.read_table(f, columns=["extra_info"])
        except Exception as e:  # noqa: BLE001 - pyarrow's errors for a bad or column-less file
            raise RecipeError("%s: not a data set of anvil tasks (python -m anvil.rl.data makes one): %s" % (f, e))
        for i, extra in enumerate(table.column("extra_info").to_pylist()):
            try:
                task_of(extra, "%d of %s" % (i, f))
            except TaskRowError as e:
                raise RecipeError(str(e))
        if table.num_rows == 0:
            raise RecipeError("%s: no rows" % f)


def check_ppo(cfg):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from anvil.rl import verl_loop
    check_model(cfg.actor_rollout_ref.model.path, "actor_rollout_ref.model.path")
    check_task_rows(files_of(cfg.data.train_files, "data.train_files"))
    check_task_rows(files_of(cfg.data.val_files, "data.val_files"))
    loops = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    if not os.path.isfile(loops):
        raise RecipeError("actor_rollout_ref.rollout.agent.agent_loop_config_path: %s: no such file" % loops)
    try:
        verl_loop.settings_of({}, cfg.get("anvil"))
    except ValueError as e:
        raise RecipeError(str(e))
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        for key in ("algorithm", "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic"):
            node = cfg
            for part in key.split("."):
                node = node[part]
            omega_conf_to_dataclass(node)
    except Exception as e:  # noqa: BLE001 - veRL's checks raise assertions, ValueErrors and hydra's errors
        raise RecipeError("veRL refuses the config: %s: %s" % (type(e).__name__, str(e).strip().splitlines()[-1]
                                                                if str(e).strip() else ""))


def check_sft(cfg):
    from transformers import AutoTokenizer
    from verl.trainer.sft_trainer import create_sft_dataset
    check_model(cfg.model.path, "model.path")
    files = files_of(cfg.data.train_files, "data.train_files")
    from anvil.rl.sft_data import RftDataError
    tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(cfg.model.path)) \
        if os.path.isdir(os.path.expanduser(cfg.model.path)) else None
    try:
        data = create_sft_dataset(files, cfg.data, tokenizer, None)  # veRL's own loader of the data set class
    except RftDataError as e:
        raise RecipeError(str(e))
    if len(data) == 0:
        raise RecipeError("data.train_files: no trajectories in %s" % ", ".join(files))
    return len(data)


def summary(cfg, stage):
    if not is_ppo(cfg):
        return ["%s: SFT on %s, lr %g, %s epoch(s)" % (stage, cfg.data.train_files, cfg.optim.lr,
                                                        cfg.trainer.total_epochs)]
    a, r, alg = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm
    turns = (cfg.get("anvil") or {}).get("max_turns") or "150"
    return ["%s: PPO (%s), %s steps, batch %s, actor lr %g, critic lr %g" % (
                stage, alg.adv_estimator, cfg.trainer.total_training_steps, cfg.data.train_batch_size,
                a.optim.lr, cfg.critic.optim.lr),
            "  clip %g / %g, gamma %g, lambda %g, critic warm-up %s steps" % (
                a.clip_ratio_low, a.clip_ratio_high, alg.gamma, alg.lam, cfg.trainer.critic_warmup),
            "  context %d tokens (prompt %d + response %d), at most %s turns, rollout correction: %s at %s" % (
                r.prompt_length + r.response_length, r.prompt_length, r.response_length, turns,
                alg.rollout_correction.rollout_is, alg.rollout_correction.rollout_is_threshold)]


def check(stage, overrides=()):
    """The composed, checked config and its summary lines; RecipeError names what is wrong."""
    cfg = compose(stage, overrides)
    check_missing(cfg)
    if is_ppo(cfg):
        check_ppo(cfg)
    else:
        check_sft(cfg)
    return cfg, summary(cfg, stage)


def anvil_env(cfg):
    """The variables the agent loop reads on veRL's workers (anvil serve's address and token): a
    node that `ray start` began has not the driver's environment."""
    from anvil.rl import verl_loop
    settings = verl_loop.settings_of({}, cfg.get("anvil"))
    return {k: os.environ[k] for k in ("ANVIL_SERVE_URL", settings["token_env"]) if os.environ.get(k)}


def init_ray(cfg):
    """Ray started as veRL's run_ppo starts it (its runtime environment, the config's ray_init), with
    anvil's variables added to the workers' environment; the token is not printed (run_ppo prints
    its runtime environment)."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    if ray.is_initialized():
        return
    runtime = get_ppo_ray_runtime_env(cfg)
    if cfg.transfer_queue.enable:
        runtime.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
    extra = anvil_env(cfg)
    runtime.setdefault("env_vars", {}).update(extra)
    init = cfg.ray_kwargs.get("ray_init", {})
    merged = OmegaConf.merge(runtime, init.get("runtime_env", {}))
    kwargs = OmegaConf.to_container(OmegaConf.create({**init, "runtime_env": merged}))
    print("anvil.rl.train: ray.init with veRL's runtime environment and %s"
          % (", ".join(sorted(extra)) or "no anvil variable (the loop's defaults)"))
    ray.init(**kwargs)


def run(cfg):
    if is_ppo(cfg):
        from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
        from verl.utils.device import auto_set_device
        auto_set_device(cfg)
        init_ray(cfg)
        run_ppo(cfg, task_runner_class=TaskRunnerV1)
    else:
        from verl.trainer.sft_trainer import run_sft
        run_sft(cfg)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    if not argv or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        cfg, lines = check(argv[0], argv[1:])
    except RecipeError as e:
        print("anvil.rl.train: %s" % e, file=sys.stderr)
        return 1
    print("\n".join(lines))
    if dry:
        print("dry run: the config is complete and veRL accepts it")
        return 0
    run(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
