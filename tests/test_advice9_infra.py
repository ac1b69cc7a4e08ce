"""Advice of the ninth blind set's first round (tests/corpus/advice9), Ray, host and Xid items: a
KubeRay head pod killed at its memory limit, a Ray task larger than any node, an Xid 109 and a
Ray memory-monitor kill on a verl-family driver, each read from the set's log and, where the
other side can be shown, from a rule fixture or a small synthetic log that keeps the old advice."""

from __future__ import annotations

from app.engine.models import Analysis
from tests.advicekit import facts as _facts
from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
_set = set_reader("advice9")
CORPUS = ROOT / "tests" / "corpus"


def _corpus(analyze: Analyze, rel: str) -> Analysis:
    path = CORPUS / rel
    return analyze(path.read_bytes(), name=path.name)


# 1. a KubeRay head pod OOMKilled at start: the head container's limit, not the training's memory


def test_an_oomkilled_kuberay_head_gets_the_head_limit_not_training_or_slurm(analyze: Analyze) -> None:
    a = _set(analyze, "u-kuberay-4287-head-pod-oomkilled.log")
    text = _root(a, "host-oom-killer").remediation
    assert "KubeRay head pod (its label `ray.io/node-type=head` in the log)" in text
    assert "the `ray-head` container's `resources.limits.memory` (and `requests.memory` with it)" in text
    assert "`headGroupSpec.template.spec.containers`" in text and "4Gi or more" in text
    assert "ray-operator/config/samples/ray-cluster.autoscaler.yaml: download it" in text
    assert "Exit code 137 is 128 + 9" in text
    # no job ran: no training memory; Kubernetes, not Slurm
    assert "num_workers" not in text and "rollout" not in text and "CPU offload" not in text
    assert "Slurm" not in text and "--mem" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    assert "The Ray head was killed at its memory limit" in a.action.why[0]
    assert "what the job loads" not in a.action.why[0]


def test_the_gcs_killed_by_the_kernel_is_the_head_and_a_job_oom_keeps_its_advice(analyze: Analyze) -> None:
    gcs = _fixture(analyze, "host", "host-oom-killer.match-gcs.log")
    text = _root(gcs, "host-oom-killer").remediation
    assert "The process killed is `gcs_server`, Ray's GCS" in text and "num_workers" not in text
    # the kernel killing a training process: host memory per node, and no Slurm flags without Slurm
    job = _fixture(analyze, "host", "host-oom-killer.match.log")
    text = _root(job, "host-oom-killer").remediation
    assert "Lower host memory per node" in text and "a larger container limit or a node with more RAM" in text
    assert "Slurm" not in text and "gcs_server" not in text and "KubeRay" not in text
    assert job.action is not None and "what the job loads" in job.action.why[0]
    # Slurm's own OOM notice keeps --mem
    slurm = _fixture(analyze, "host", "host-oom-killer.match-slurm.log")
    text = _root(slurm, "host-oom-killer").remediation
    assert "Or request more memory from Slurm: `--mem` (`--mem=0` for the whole node)" in text
    assert "Lower host memory per node" in text


def test_an_oomkilled_worker_pod_gets_its_own_container_limit(analyze: Analyze) -> None:
    a = analyze(
        "$ kubectl describe pod trainer-worker-0\n"
        "    Last State:     Terminated\n"
        "      Reason:       OOMKilled\n"
        "      Exit Code:    137\n"
    )
    text = _root(a, "host-oom-killer").remediation
    assert "Kubernetes killed the container at its memory limit (reason OOMKilled)" in text
    assert "Lower host memory per node" in text and "Exit code 137 is 128 + 9" in text
    assert "KubeRay head" not in text and "Slurm" not in text


# 2. one task asking for more GPUs than any node has, on an idle cluster that has them in total


def test_a_task_larger_than_any_node_is_split_not_hunted_for_leftovers(analyze: Analyze) -> None:
    a = _set(analyze, "u-ray-50348-single-task-16gpu-two-nodes.log")
    text = _root(a, "ray-resource-request-pending").remediation
    # the node count from `ray status` (advice9 round 2, tests/test_advice_values9.py)
    assert "One task or actor asks for 16 GPUs, and the cluster has 16.0 GPUs on 2 nodes" in text
    assert "none of the 2 has 16 of them" in text
    assert "2 actors with `num_gpus=8`" in text and "`STRICT_SPREAD`" in text
    assert "`ScalingConfig(num_workers=16, use_gpu=True)`" in text
    # nothing holds a GPU: no leftover hunting, no restart
    assert "ray stop" not in text and "ray list actors" not in text
    assert "Size the job to the free resources" not in text
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    why = a.action.why[0]
    assert "asks for more than the cluster has" not in why and "no node has that many" in why
    assert {
        "pending_demand_gpus": 16,
        "cluster_gpus_used": 0.0,
        "ray_task_larger_than_node": True,
    }.items() <= _facts(a).items()


def test_a_pending_request_with_gpus_in_use_keeps_the_leftover_step(analyze: Analyze) -> None:
    a = analyze(
        "Active:\n 1 node_9a8e4a65\n 1 node_9749a2bf\nPending:\n (no pending nodes)\n"
        "Usage:\n 0.0/384.0 CPU\n 8.0/16.0 GPU\n"
        "Demands:\n {'GPU': 16.0}: 1+ pending tasks/actors\n"
    )
    text = _root(a, "ray-resource-request-pending").remediation
    # 8 of the 16 are held: something may hold them, and the split-the-task inference does not hold
    assert '`ray list actors --filter "state=ALIVE"` shows who holds the resources' in text
    assert "One task or actor asks for" not in text
    assert "ray_task_larger_than_node" not in _facts(a)
    assert a.action is not None and "asks for more than the cluster has" in a.action.why[0]
    # a log with GPUs in use (public corpus) keeps it too
    pub = _corpus(analyze, "public/llm-applications-58-ray-request-cannot-be-scheduled.log")
    assert "ray list actors" in _root(pub, "ray-resource-request-pending").remediation


# 3. Xid 109 at random points of a run: the driver and the card, not the job's kernels


def test_xid_109_alone_points_at_the_driver_and_the_card(analyze: Analyze) -> None:
    a = _set(analyze, "u-pytorch-74235-xid109-ctx-switch-timeout.log")
    f = _root(a, "gpu-xid-context-switch-timeout")
    text = f.remediation
    assert "Xid 109 on PCI:0000:01:00" in text
    # both drivers the report tried (advice9 round 2, tests/test_advice_values9.py)
    assert "The log says drivers 520.56 and 525.89 were both tried" in text
    assert "`dcgmi diag -r 3`" in text and "reseat the card" in text and "PCIe" in text
    # not the application-fault reading
    assert "`compute-sanitizer` to find it" not in text and "usual suspects" not in text
    assert "`compute-sanitizer` rarely find anything" in text
    assert "raised by the job's own kernels" not in f.title
    assert a.action is not None and a.action.decision == "retry_excluding"
    assert "the driver or the card is the likelier cause" in a.action.why[0]
    assert not [x for x in a.findings if x.rule_id == "gpu-xid-application-fault"]


def test_xid_109_after_a_kernel_fault_stays_the_applications(analyze: Analyze) -> None:
    a = _corpus(analyze, "public/gpud-46-xid13-graphics-exception.log")
    _root(a, "gpu-xid-application-fault")
    assert not [x for x in a.findings if x.rule_id == "gpu-xid-context-switch-timeout"]
    assert a.action is not None and a.action.decision == "fix_and_rerun"
    fx = _fixture(analyze, "hardware", "gpu-xid-context-switch-timeout.nomatch-after-13.log")
    assert not [x for x in fx.findings if x.rule_id == "gpu-xid-context-switch-timeout"]
    # the open driver's banner gives the version there
    banner = _fixture(analyze, "hardware", "gpu-xid-context-switch-timeout.match.log")
    assert "The log names driver 595.58.03" in _root(banner, "gpu-xid-context-switch-timeout").remediation


# 4. Ray's memory monitor killing verl's / EasyR1's driver: host RAM, CPU offload, the log's own IP


def test_a_killed_main_task_gets_the_offload_step_and_the_logs_own_ip(analyze: Analyze) -> None:
    a = _set(analyze, "t-easyr1-59-host-ram-offload.log")
    text = _root(a, "ray-node-out-of-memory").remediation
    assert "The killed task is `main_task`, the driver task of verl's `main_ppo.py`" in text
    assert "726.33 of 760.0 GB are held by the FSDP workers" in text
    assert "If CPU offload of parameters or optimizer states is on" in text
    assert "`worker.actor.offload.offload_params=false`" in text and "`optimizer_offload=False`" in text
    # the redacted "IP: 1xx" is no address; the command the log prints is
    assert "`ray logs raylet.out -ip 172.24.203.178`" in text and "-ip 1`" not in text
    facts = _facts(a)
    assert facts["ray_oom_node_ip"] == "172.24.203.178"
    # 0.87 GB of 760: no "873 workers fill the node"
    assert "ray_workers_fill_node" not in facts


def test_offload_shown_on_or_off_and_large_victims_keep_the_fill_count(analyze: Analyze) -> None:
    kill = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.0.5, ID: ab12) where the task (task ID: cd34, name=main_task, pid=31, "
        "memory used=0.87GB) was running was 726.33GB / 760.00GB (0.9557), which exceeds the memory usage "
        "threshold of 0.95. Ray killed this worker (ID: ef56) because it was the most recently scheduled task; "
        "to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.5`.\n"
    )
    on = analyze('  "offload_params": true,\n' + kill)
    text = _root(on, "ray-node-out-of-memory").remediation
    assert "CPU offload of the parameters is on here" in text and "If CPU offload" not in text
    off = analyze("actor_rollout_ref.actor.fsdp_config.param_offload=False\n" + kill)
    text = _root(off, "ray-node-out-of-memory").remediation
    assert "The killed task is `main_task`" not in text
    # a redacted address and no command: the held-only step without an IP
    redacted = analyze(kill.replace("IP: 10.0.0.5", "IP: 1xx").replace(" -ip 10.0.0.5", " -ip <ip>"))
    text = _root(redacted, "ray-node-out-of-memory").remediation
    assert "list them on that node (`ray logs raylet.out -ip <node IP>`" in text and "on 1xx" not in text
    assert "ray_oom_node_ip" not in _facts(redacted)
    # a worker holding a large share still gets the count (4 of that size fill the node)
    big = _corpus(analyze, "fresh/verl-2950-dapo-cpu-oom.log")
    assert _facts(big)["ray_workers_fill_node"] == 4
    assert "4 workers of that size fill the node" in _root(big, "ray-node-out-of-memory").remediation
