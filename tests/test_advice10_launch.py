"""The tenth blind set's launcher and host items (tests/corpus/advice10): a SIGHUP's step and time,
torchrun's random run id, ... (first contact at 8a45ba3, reviewers zw/zx)."""

from __future__ import annotations

from tests.advicekit import CORPUS, facts, root, rule_fixture, set_reader
from tests.conftest import Analyze

CORPUS_SET = CORPUS / "advice10"

read = set_reader("advice10")


def _advice(a) -> str:  # type: ignore[no-untyped-def]
    f = a.root_cause
    assert f is not None
    return f.remediation


def test_sighup_step_uses_the_bars_step_and_time(analyze: Analyze) -> None:
    a = read(analyze, "v-msswift-9788-sighup.log")
    root(a, "torchelastic-sighup")
    got = facts(a)
    assert (got["hup_at_step"], got["hup_total_steps"], got["hup_steps_left"]) == (482, 672, 190)
    assert (got["hup_elapsed"], got["hup_remaining"]) == ("6:32:43", "2:52:41")
    text = _advice(a)
    assert "step 482 of 672, after 6:32:43" in text
    assert "newest checkpoint saved before step 482" in text
    # the bar is read only where the hangup line is glued to it: an earlier bar is not the step
    plain = analyze(
        "Train:  71%|###  | 480/672 [6:31:08<2:23:20, 44.79s/it]\n"
        "W0722 21:16:14.716000 3681165 torch/distributed/elastic/agent/server/api.py:739]"
        " Received 1 death signal, shutting down workers\n"
    )
    root(plain, "torchelastic-sighup")
    assert "hup_at_step" not in facts(plain)
    assert "step 480" not in _advice(plain)


def test_torchrun_random_run_id_is_a_rendezvous_of_its_own(analyze: Analyze) -> None:
    a = read(analyze, "w-cllama2-274-torchrun-random-run-id.log")
    assert root(a, "dist-rendezvous-timeout").failure_class == "dist.rendezvous_timeout"
    got = facts(a)
    assert got["torchrun_random_run_id"] == "174580650467654300307713793029077439978"
    assert got["torch_version"] == "2.0.1"
    text = _advice(a)
    assert "random run id (174580650467654300307713793029077439978)" in text
    assert "same `--rdzv_id`" in text and "`--node_rank`" in text
    assert "Clear leftovers" not in text  # the generic steps give way to the run id's
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "174580650467654300307713793029077439978" in " ".join(a.action.why)


def test_random_run_id_with_a_workers_error_is_left_to_that_error(analyze: Analyze) -> None:
    a = rule_fixture(analyze, "dist", "dist-rendezvous-timeout.nomatch-random-run-id-child-failed.log")
    assert a.root_cause is None or a.root_cause.rule_id != "dist-rendezvous-timeout"


def test_kernel_task_table_names_the_one_rank_that_filled_the_host(analyze: Analyze) -> None:
    a = read(analyze, "w-llamafactory-3230-host-oom-one-rank-930g.log")
    f = root(a, "host-oom-killer")
    assert f.failure_class == "host.oom_killed" and "task-table" in f.signatures
    got = facts(a)
    # rss counts 4 KiB pages: 243385180 x 4096 B = 928.4 GiB; the three other ranks ~2.53 M pages
    assert (got["oom_table_top_pid"], got["oom_table_top_rss_pages"]) == (202779, 243385180)
    assert got["oom_table_top_rss_gib"] == 928.4
    assert got["oom_table_peer_pids"] == "202780, 202781, 202782"  # not the small launcher pythons
    assert got["oom_table_peer_rss_gib"] == 9.6
    text = _advice(a)
    assert "PID 202779 (`python`) holds 243385180 pages" in text and "928.4 GiB" in text
    assert "(PIDs 202780, 202781, 202782) hold about 9.6 GiB each" in " ".join(text.split())
    assert "run fewer processes per node" not in text  # one process, not every rank
    assert "a node with more RAM" not in text


def test_task_table_of_even_ranks_gets_no_one_process_step(analyze: Analyze) -> None:
    rows = [
        "[100.000001] [  1001]  1000  1001  3347546  2529507 25161728     3314          -998 python\n",
        "[100.000002] [  1002]  1000  1002  3347546  2526757 25161728     3314          -998 python\n",
        "[100.000003] [  1003]  1000  1003  3347546  2528782 25161728     3314          -998 python\n",
        "[100.000004] [  1004]  1000  1004  3347546  2530001 25161728     3314          -998 python\n",
    ]
    a = analyze("".join(rows))
    root(a, "host-oom-killer")
    assert "oom_table_one_process" not in facts(a)
    assert "one process, not the job" not in _advice(a)
    assert "a node with more RAM" in _advice(a)  # the generic advice stays
    # the kernel's "Killed process" line keeps its own step (the old behaviour)
    k = rule_fixture(analyze, "host", "host-oom-killer.match.log")
    assert "The kernel killed PID 23793" in _advice(k)


def test_deepspeed_resume_killed_while_optimizer_states_load(analyze: Analyze) -> None:
    a = read(analyze, "w-deepspeed-3938-resume-optim-load-killed.log")
    f = root(a, "host-oom-killer")
    assert f.signatures == ["deepspeed-killed-loading-optimizer-states"]
    assert facts(a)["launcher_killed_pids"] == "230, 231, 232, 233"
    text = _advice(a)
    assert "PIDs 230, 231, 232, 233" in text and "from 00:38:05" in text and "at 00:37:49" in text
    assert "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt" in text
    assert "load_optimizer_states=False" in text and "load_module_only=True" in text
    assert "while a checkpoint was written" not in text  # a load, not a save
    # a load that finished, or a rank's own traceback, is not read as a kill during the load
    done = analyze(
        "[2023-07-25 00:37:49,180] [INFO] [torch_checkpoint_engine.py:27:load] [Torch] Loading checkpoint"
        " from /ckpt/global_step10/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt...\n"
        "[2023-07-25 00:37:59,180] [INFO] [torch_checkpoint_engine.py:29:load] [Torch] Loaded checkpoint"
        " from /ckpt/global_step10/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt.\n"
        "[2023-07-25 00:38:05,103] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 230\n"
    )
    assert done.root_cause is None or done.root_cause.rule_id != "host-oom-killer"


def test_lightning_global_ranks_started_twice_under_slurm(analyze: Analyze) -> None:
    a = read(analyze, "w-nemo-5819-slurm-duplicate-global-ranks.log")
    f = root(a, "nccl-duplicate-rank")
    assert f.failure_class == "dist.duplicate_rank" and f.signatures == ["lightning-global-rank-twice"]
    got = facts(a)
    assert (got["dup_global_ranks"], got["dup_global_world"], got["dup_global_unclaimed"]) == (
        "1-3",
        8,
        "4-7",
    )
    assert got["dup_global_tasks"] == 2 and "nemo_multinode_no_slurm" in got
    text = " ".join(_advice(a).split())
    assert "Global ranks 1-3 each started more than once" in text and "no line claims ranks 4-7" in text
    assert "`#SBATCH --nodes=2 --ntasks-per-node=4`" in text
    assert "`torchrun --nnodes=2 --nproc_per_node=4 --node_rank=$SLURM_NODEID`" in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    # each rank once (two nodes numbered right) is no duplicate
    ok = analyze(
        "".join(
            f"{t}: Initializing distributed: GLOBAL_RANK: {t * 4 + r}, MEMBER: {t * 4 + r + 1}/8\n"
            for t in (0, 1)
            for r in range(4)
        )
    )
    assert "dup_global_ranks" not in facts(ok)
    assert ok.root_cause is None or ok.root_cause.rule_id != "nccl-duplicate-rank"
    # NCCL's own message keeps its rank and count
    n = rule_fixture(analyze, "nccl", "nccl-duplicate-rank.match.log")
    assert "Rank 1 of 8 was claimed twice" in root(n, "nccl-duplicate-rank").remediation


def test_nemo_rl_placement_group_wait_cut_off_is_only_a_possible_cause(analyze: Analyze) -> None:
    a = read(analyze, "v-nemorl-skypilot-7257-pg-timeout.log")
    assert a.root_cause is None  # the exception is cut off: not claimed
    (p,) = [p for p in a.possible_causes if p.rule_id == "ray-infeasible-resource-request"]
    assert p.failure_class == "ray.unschedulable_resources" and p.confidence < 0.35
    assert "`ray status`" in p.confirm and "`cluster.gpus_per_node`" in p.confirm
    assert facts(a)["nemo_rl_ray_nodes"] == 2
    assert not any("NCCL_DEBUG" in s for s in a.next_steps)
    # with NeMo-RL's own timeout after the traceback it is the root cause, with the node count
    text = (CORPUS_SET / "v-nemorl-skypilot-7257-pg-timeout.log").read_text() + (
        "(head, rank=0, pid=4734) TimeoutError: Timed out waiting for placement groups to be ready. The cluster may"
        " not have enough resources to satisfy the requested configuration, or the resources may be busy with other tasks.\n"
    )
    full = analyze(text)
    f = root(full, "ray-infeasible-resource-request")
    assert "the log counted 2" in " ".join(f.remediation.split())
