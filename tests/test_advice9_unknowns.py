"""The ninth blind set's unknowns (tests/corpus/advice9): logs no rule named, each now named with
the class the expert gave and the expert's decisive step, read from the set's log; where the old
advice (or silence) was right elsewhere, a rule fixture or a small synthetic log keeps it."""

from __future__ import annotations

from app.engine.models import Analysis
from tests.advicekit import CORPUS, set_reader
from tests.advicekit import facts as _facts
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
_set = set_reader("advice9")


def _not_root(a: Analysis, rule_id: str) -> None:
    assert a.root_cause is None or a.root_cause.rule_id != rule_id


# 1. SIGBUS in a container: the container's /dev/shm, recreated with --shm-size / --ipc=host


def test_sigbus_in_docker_is_the_containers_shm(analyze: Analyze) -> None:
    a = _set(analyze, "t-llamafactory-752-docker-sigbus.log")
    f = _root(a, "bus-error-shm")
    assert f.signatures == ["container"] and f.captures["sigbus_local_rank"] == "1"
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    text = f.remediation
    assert "The log names docker: a container's /dev/shm is its own tmpfs" in text
    assert "Recreate the container with `--shm-size=16g` (or `--ipc=host`" in text
    assert "`accelerate test`" in text
    # the SIGTERM'd ranks are the launcher's doing, not failures of their own
    assert "pid 6262 first) were stopped by it" in text
    # the generic container sentence is replaced by the one that names the log's container
    assert "In a container, /dev/shm is the container's own" not in text


def test_sigbus_without_a_container_or_shm_line_stays_unnamed(analyze: Analyze) -> None:
    # the bare failure table, nothing about shared memory or a container: still no cause
    a = _fixture(analyze, "host", "bus-error-shm.nomatch-torchrun.log")
    _not_root(a, "bus-error-shm")
    # a shared-memory line but no container named: the conditional container step stays
    b = _fixture(analyze, "host", "bus-error-shm.match-torchrun.log")
    text = _root(b, "bus-error-shm").remediation
    assert "In a container, /dev/shm is the container's own" in text and "The log names" not in text


def test_words_that_do_not_place_the_job_in_a_container(analyze: Analyze) -> None:
    a = analyze(
        "If you are inside a Docker container, you can increase /dev/shm size by passing "
        "'--shm-size=10.24gb' to 'docker run'\n"
        "NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>\n"
        "Requirement already satisfied: docker-pycreds>=0.4.0\n"
        "enroot import docker://nvcr.io#nvidia/pytorch:24.08-py3\n"
        "The worker may have exceeded K8s pod memory limits.\n"
        "- 是否使用 Docker 部署（是/否）：否\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 12) of binary: python\n"
    )
    assert "container_runtime" not in _facts(a)
    b = analyze(
        "we run it inside the container built from our image\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 12) of binary: python\n"
    )
    assert _facts(b)["container_runtime"] == "inside the container"
    assert _root(b, "bus-error-shm").signatures == ["container"]


def test_sigbus_on_kubernetes_fixture(analyze: Analyze) -> None:
    a = _fixture(analyze, "host", "bus-error-shm.match-kubernetes.log")
    f = _root(a, "bus-error-shm")
    assert "The log names kubectl" in f.remediation and "`emptyDir` with `medium: Memory`" in f.remediation
    # no accelerate in this log: no `accelerate test`
    assert "accelerate test" not in f.remediation


# 2. vLLM's divide() with no stack: the tensor-parallel size the log gives, and sizes that divide


def test_vllm_tp3_not_dividing_32768_gets_sizes_that_divide(analyze: Analyze) -> None:
    a = _set(analyze, "u-vllm-6385-tp3-not-divisible.log")
    f = _root(a, "megatron-heads-not-divisible-by-tp")
    assert f.signatures == ["tp-world-size"]
    assert f.failure_class == "config.batch_not_divisible"
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    text = f.remediation
    assert "The tensor-parallel size 3 does not divide 32768" in text
    assert "the message does not say which" in text and "`num_key_value_heads`" in text
    assert "`--tensor-parallel-size 2`" in text and "`--tensor-parallel-size 4` on 4 GPUs" in text
    # not the head-count steps: nothing says 32768 is a head count, and no "use 2 or 1"
    assert "the largest sizes up to" not in text and "vLLM shards the heads" not in text
    assert "gpu_memory_utilization" not in text and "disable_custom_all_reduce" not in text


def test_the_assertion_alone_or_with_another_divisor_is_not_named(analyze: Analyze) -> None:
    a = _fixture(analyze, "config", "megatron-heads-not-divisible-by-tp.nomatch-no-tp-context.log")
    _not_root(a, "megatron-heads-not-divisible-by-tp")
    b = analyze(
        "[rank0]: AssertionError: 10 is not divisible by 3\n"
        "WARNING 07-13 03:43:42 custom_all_reduce.py:129] Custom allreduce is disabled due to an unsupported "
        "world size: 5. Supported world sizes: [2, 4, 6, 8]. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.\n"
    )
    _not_root(b, "megatron-heads-not-divisible-by-tp")


def test_a_head_count_in_sglang_keeps_its_head_steps(analyze: Analyze) -> None:
    a = _fixture(analyze, "config", "megatron-heads-not-divisible-by-tp.match-sglang.log")
    text = _root(a, "megatron-heads-not-divisible-by-tp").remediation
    assert "`--tp-size 4`" in text and "the message does not say which" not in text


# 3. Transformer Engine's undefined symbol with the message broken over two lines


def test_te_undefined_symbol_on_the_next_line_rebuilds_te_for_the_installed_torch(analyze: Analyze) -> None:
    a = _set(analyze, "u-transformerengine-1684-torch-abi-undefined-symbol.log")
    f = _root(a, "python-extension-undefined-symbol")
    assert f.signatures == ["split-line"] and f.captures["symbol"].startswith(
        "_ZN3c106detail14torchCheckFail"
    )
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    text = f.remediation
    assert '`pip install --no-build-isolation "transformer_engine[pytorch]==2.1.0"`' in text
    assert "compiled against torch 2.5.1" in text and "`transformer-engine-cu12`" in text
    # the flash-attn wheel advice is not for TE's own extension
    assert "Reinstall the extension for exactly this torch" not in text


def test_te_imported_by_transformers_and_flash_attn_keep_their_steps(analyze: Analyze) -> None:
    hf = _fixture(analyze, "python", "python-extension-undefined-symbol.match-te-via-transformers.log")
    text = _root(hf, "python-extension-undefined-symbol").remediation
    assert "pip uninstall -y transformer-engine" in text and "transformer_engine[pytorch]==" not in text
    fa = _fixture(analyze, "python", "python-extension-undefined-symbol.match.log")
    text = _root(fa, "python-extension-undefined-symbol").remediation
    assert (
        "Reinstall the extension for exactly this torch" in text
        and "Transformer Engine's PyTorch" not in text
    )
    # an "undefined symbol" line with no library before it is not the split message
    lone = analyze("something went wrong\nundefined symbol: _ZN3c104cuda9SetDeviceEi\n")
    _not_root(lone, "python-extension-undefined-symbol")


def test_te_and_torch_versions_from_an_issue_template(analyze: Analyze) -> None:
    a = analyze("- **Transformer Engine version:** 1.13.0  \n- **PyTorch version:** 2.4.0  \n")
    facts = _facts(a)
    assert facts["te_version"] == "1.13.0" and facts["torch_version"] == "2.4.0"
    assert facts["torch_version_minor"] == 4


# 4. a file missing from a hub snapshot on one rank: the cache was filled while ranks loaded


def test_a_rank_missing_a_hub_snapshot_file_is_the_cache_race(analyze: Analyze) -> None:
    a = _set(analyze, "u-milabench-281-hf-cache-race-rank14.log")
    f = _root(a, "hf-model-files-race")
    assert f.signatures == ["hub-snapshot-file-missing"] and f.ranks == [14]
    text = f.remediation
    # with its node (advice9 round 2, tests/test_advice_values9.py)
    assert "Rank 14, on node cn-n001, found the snapshot of the model in the Hugging Face cache" in text
    assert (
        "/tmp/workspace/cuda/results/cache/huggingface/hub but not its file `vae/diffusion_pytorch_model.safetensors`"
        in text
    )
    hub = "/tmp/workspace/cuda/results/cache/huggingface/hub"
    assert f"`huggingface-cli download stabilityai/stable-diffusion-2 --cache-dir {hub}`" in text
    assert "`HF_HUB_OFFLINE=1`" in text and "let local rank 0 of each node fetch it" in text
    assert any(p.path == ["HF_HUB_OFFLINE"] for p in f.patches)
    # fill the caches first: a rerun as it is meets an incomplete cache again
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    assert "Rank 14 found the model's snapshot in /tmp/workspace" in a.action.why[0]
    # slime's --model-name is another job's remedy
    assert "--model-name" not in text and not any(p.path == ["--model-name"] for p in f.patches)


def test_one_process_missing_a_snapshot_file_is_not_a_race(analyze: Analyze) -> None:
    a = _fixture(analyze, "hf", "hf-model-files-race.nomatch-hub-snapshot-one-process.log")
    _not_root(a, "hf-model-files-race")
    # rank 0 alone does not show several processes either
    b = analyze(
        "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/root/.cache/huggingface/hub/models--gpt2/snapshots/607a30d783dfa663caf39e06633721c8d4cfcd7e/config.json'\n"
    )
    _not_root(b, "hf-model-files-race")
    # the slime checkpoint race keeps its --model-name step
    c = _fixture(analyze, "hf", "hf-model-files-race.match.log")
    assert "pass `--model-name`" in _root(c, "hf-model-files-race").remediation
    assert c.action is not None and c.action.decision == "retry"


def test_a_repo_without_an_owner_gets_its_own_download_line(analyze: Analyze) -> None:
    a = analyze(
        "[rank3]: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/scratch/hf/hub/models--gpt2/snapshots/607a30d783dfa663caf39e06633721c8d4cfcd7e/model.safetensors'\n"
    )
    text = _root(a, "hf-model-files-race").remediation
    assert (
        "`huggingface-cli download gpt2 --cache-dir /scratch/hf/hub`" in text and "download /gpt2" not in text
    )


# 5. NeMo-RL's placement group that never became ready: the 8 nodes it needs


def test_nemorl_placement_group_never_ready_counts_the_nodes(analyze: Analyze) -> None:
    a = _set(analyze, "t-nemorl-2352-gym-pg-timeout.log")
    f = _root(a, "ray-resource-request-pending")
    assert f.signatures == ["pg-ready-wait"] and f.failure_class == "ray.unschedulable_resources"
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    text = f.remediation
    assert "NeMo-RL needs 8 nodes here (policy 4 + NeMo Gym 4 + reward model 0)" in text
    assert "scale the cluster's worker group to 8 nodes" in text and "`ray status` / `ray list nodes`" in text
    # the wait's own 1000 s (advice9 round 2, tests/test_advice_values9.py)
    assert "a longer timeout only makes the job fail later" in text


def test_another_jobs_placement_group_wait_gets_the_general_step(analyze: Analyze) -> None:
    a = analyze(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in main\n'
        "    ray.get(pg.ready(), timeout=60)\n"
        '  File "/usr/lib/python3/site-packages/ray/_private/worker.py", line 2613, in get\n'
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)\n"
        "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n"
    )
    text = _root(a, "ray-resource-request-pending").remediation
    assert "placement group `pg` to be placed (`ray.get(pg.ready(), timeout=60)`)" in text
    assert "NeMo-RL" not in text
    # the source line alone (no Ray frame after it) is not a wait that failed
    b = analyze("    ray.get(pg.ready(), timeout=60)\nprint('ok')\n")
    _not_root(b, "ray-resource-request-pending")


# 6. accelerate on two machines with no main_process_ip: nowhere to meet


def test_accelerate_two_machines_without_main_process_ip(analyze: Analyze) -> None:
    a = _set(analyze, "u-accelerate-3658-multinode-no-main-process-ip.log")
    f = _root(a, "dist-rendezvous-timeout")
    assert f.signatures == ["accelerate-multinode-no-address"]
    assert a.action is not None and (a.action.decision, a.action.basis) == ("fix_and_rerun", "facts")
    text = f.remediation
    assert "sets `num_machines: 2` and names no `main_process_ip`" in text
    assert "`main_process_port` (if it is not set)" in text and "`--main_process_ip`" in text
    # not the missing-process or stale-launcher readings
    assert "Count the ranks that started" not in text and "Clear leftovers" not in text
    assert "never joined or stopped answering" not in text


def _accelerate_log(config: str, tail: str = "") -> str:
    log = (CORPUS / "advice9" / "u-accelerate-3658-multinode-no-main-process-ip.log").read_text()
    return log.replace("num_machines: 2\n", config) + tail


def test_accelerate_traceback_with_an_exception_or_an_address_is_left_alone(analyze: Analyze) -> None:
    # the worker failed: the launcher's ChildFailedError follows its frames
    failed = analyze(
        _accelerate_log(
            "num_machines: 2\n",
            "    raise ChildFailedError(\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n",
        )
    )
    _not_root(failed, "dist-rendezvous-timeout")
    with_ip = analyze(
        _accelerate_log("num_machines: 2\nmain_process_ip: 10.0.0.1\nmain_process_port: 29500\n")
    )
    _not_root(with_ip, "dist-rendezvous-timeout")
    one = analyze(_accelerate_log("num_machines: 1\n"))
    _not_root(one, "dist-rendezvous-timeout")
    # a null address is no address
    null_ip = analyze(_accelerate_log("num_machines: 2\nmain_process_ip: null\n"))
    assert _root(null_ip, "dist-rendezvous-timeout").signatures == ["accelerate-multinode-no-address"]


def test_a_rendezvous_timeout_with_an_address_keeps_its_steps(analyze: Analyze) -> None:
    a = _fixture(analyze, "dist", "dist-rendezvous-timeout.match-elastic.log")
    text = _root(a, "dist-rendezvous-timeout").remediation
    assert "never joined or stopped answering" in text and "main_process_ip" not in text
