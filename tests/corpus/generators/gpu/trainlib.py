"""Tiny RL-style trainer shared by the scenario scripts in this folder.

Each scenario script subclasses `Trainer` and breaks one thing. The loop per
step is: rollout (sample tokens from the policy, score them) -> train
(forward/backward under DDP, grad clipping, optimizer step) -> metrics
all_reduce -> every `--eval-every` steps an eval (all_reduce of eval loss) ->
every `--ckpt-every` steps a checkpoint (torch.save on rank 0, gather_object of
the per-rank data-loader state, barrier).

Logging is what trainers usually print: `logging` lines with timestamps and
the rank, phase markers, a `step N loss X grad_norm Y step_time Z ...` line
per step on every rank, and a heartbeat thread.

Works with `--backend nccl` (one GPU per rank, LOCAL_RANK) and
`--backend gloo` (CPU). Launch with torchrun, 2 ranks.
"""
import argparse
import datetime
import logging
import math
import os
import random
import resource
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def build_parser(description=""):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--pg-timeout", type=float, default=30.0, help="process-group timeout, seconds")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="0 disables clipping")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--gen-len", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--ckpt-dir", default="/tmp/ckpt")
    p.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period, seconds (0: none)")
    p.add_argument("--no-ddp", action="store_true", help="sync grads with a hand-written all_reduce")
    p.add_argument("--fault-step", type=int, default=10, help="step at which the scenario's fault happens")
    p.add_argument("--fault-rank", type=int, default=1)
    return p


class TinyPolicy(nn.Module):
    """Token -> next-token logits and a value estimate (actor + critic heads)."""

    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.lm_head = nn.Linear(hidden, vocab)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.fc2(F.gelu(self.fc1(h)))
        return self.lm_head(h), self.value_head(h).squeeze(-1)


class RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank):
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(RankFilter(rank))
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s [rank%(rank)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        setup_logging(self.rank)
        self.log = logging.getLogger("trainer")
        self.step = 0
        self.phase = "init"
        self._stop_hb = threading.Event()

    # ------------------------------------------------------------------ setup
    def setup(self):
        a = self.args
        self.log.info("starting job: backend=%s world_size=%d rank=%d local_rank=%d pid=%d host=%s",
                      a.backend, self.world_size, self.rank, self.local_rank, os.getpid(),
                      os.uname().nodename)
        self.log.info("config: %s", vars(a))
        if a.backend == "nccl":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            nccl_v = torch.cuda.nccl.version()
            nccl_v = ".".join(map(str, nccl_v)) if isinstance(nccl_v, tuple) else str(nccl_v)
            self.log.info("torch %s cuda %s nccl %s device %s (%s)", torch.__version__, torch.version.cuda,
                          nccl_v, self.device,
                          torch.cuda.get_device_name(self.device))
            init_kwargs = {"device_id": self.device}
        else:
            self.device = torch.device("cpu")
            self.log.info("torch %s (cpu, gloo)", torch.__version__)
            init_kwargs = {}
        self.phase = "init_process_group"
        self.log.info("init_process_group(backend=%s, timeout=%ss) MASTER_ADDR=%s MASTER_PORT=%s",
                      a.backend, a.pg_timeout, os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))
        dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=a.pg_timeout), **init_kwargs)
        self.log.info("process group ready: rank %d/%d", dist.get_rank(), dist.get_world_size())
        torch.manual_seed(1234)
        random.seed(1234 + self.rank)
        self.gen = torch.Generator(device="cpu").manual_seed(42 + self.rank)
        self.model = TinyPolicy(a.vocab_size, a.hidden).to(self.device)
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log.info("model: TinyPolicy vocab=%d hidden=%d params=%.2fM", a.vocab_size, a.hidden, n_params / 1e6)
        self.phase = "ddp_init"
        if a.no_ddp:
            for p in self.model.parameters():
                dist.broadcast(p.data, src=0)
            self.ddp = self.model
        else:
            self.ddp = DDP(self.model, device_ids=[self.local_rank] if a.backend == "nccl" else None)
        if a.optimizer == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr, momentum=0.9)
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=a.lr, weight_decay=0.0)
        self.log.info("optimizer: %s lr=%g warmup=%d max_grad_norm=%g", type(self.opt).__name__, a.lr,
                      a.warmup_steps, a.max_grad_norm)
        self.data_state = {"epoch": 0, "sample_idx": 0, "rank": self.rank}
        self.start_heartbeat()

    def start_heartbeat(self):
        if self.args.heartbeat <= 0:  # a job without a heartbeat: a stuck rank prints nothing
            return
        hb = logging.getLogger("heartbeat")

        def loop():
            while not self._stop_hb.wait(self.args.heartbeat):
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                if self.args.backend == "nccl":
                    mem = "cuda_alloc_mb=%.1f" % (torch.cuda.memory_allocated(self.device) / 2**20)
                else:
                    mem = "cuda_alloc_mb=n/a"
                hb.info("alive step=%d phase=%s maxrss_mb=%.0f %s", self.step, self.phase, rss, mem)

        threading.Thread(target=loop, name="heartbeat", daemon=True).start()

    # ------------------------------------------------------------------ pieces
    def lr_at(self, step):
        a = self.args
        return a.lr * min(1.0, step / max(1, a.warmup_steps))

    def sample_prompts(self):
        a = self.args
        self.data_state["sample_idx"] += a.batch_size
        return torch.randint(0, a.vocab_size, (a.batch_size, a.prompt_len), generator=self.gen)

    @torch.no_grad()
    def generate(self, prompts):
        tokens = prompts.to(self.device)
        for _ in range(self.args.gen_len):
            logits, _ = self.model(tokens[:, -1:])
            probs = torch.softmax(logits[:, -1].float(), dim=-1)
            nxt = torch.multinomial(probs, 1)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens

    def reward_fn(self, tokens):
        gen = tokens[:, self.args.prompt_len:]
        return (gen % 2 == 0).float().mean(dim=1)

    def rollout(self, step):
        self.phase = "rollout"
        self.log.info("rollout: generating %d x %d tokens", self.args.batch_size, self.args.gen_len)
        prompts = self.sample_prompts()
        tokens = self.generate(prompts)
        rewards = self.reward_fn(tokens)
        return {"tokens": tokens, "rewards": rewards}

    def compute_loss(self, step, batch):
        tokens, rewards = batch["tokens"], batch["rewards"]
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        logits, values = self.ddp(inp)
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        adv = (rewards - rewards.mean()).unsqueeze(1)
        pg_loss = -(adv * logp).mean()
        value_loss = F.mse_loss(values.float(), rewards.unsqueeze(1).expand_as(values))
        lm_loss = -logp.mean()
        return pg_loss + 0.5 * value_loss + 0.1 * lm_loss

    def train_step(self, step, batch):
        self.phase = "train"
        self.log.info("train: update on %d sequences", batch["tokens"].shape[0])
        for g in self.opt.param_groups:
            g["lr"] = self.lr_at(step)
        self.opt.zero_grad(set_to_none=True)
        loss = self.compute_loss(step, batch)
        loss.backward()
        if self.args.no_ddp:
            self.allreduce_grads()
        if self.args.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.detach().float().norm() for p in self.model.parameters()]))
        self.opt.step()
        return loss.detach(), grad_norm.detach()

    def allreduce_grads(self):
        grads = [p.grad for p in self.model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        off = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[off:off + n].view_as(g))
            off += n

    def reduce_metrics(self, step, metrics):
        t = torch.stack([metrics[k].float().reshape(()) for k in sorted(metrics)]).to(self.device)
        dist.all_reduce(t)
        t /= self.world_size
        return {k: v for k, v in zip(sorted(metrics), t.tolist())}

    @torch.no_grad()
    def evaluate(self, step):
        self.phase = "eval"
        self.log.info("eval: running held-out rollouts at step %d", step)
        g = torch.Generator(device="cpu").manual_seed(7 + self.rank)
        prompts = torch.randint(0, self.args.vocab_size, (self.args.batch_size, self.args.prompt_len), generator=g)
        tokens = self.generate(prompts)
        reward = self.reward_fn(tokens).mean().to(self.device)
        dist.all_reduce(reward)
        reward /= self.world_size
        self.log.info("eval step %d eval_reward %.4f", step, reward.item())

    def checkpoint_path(self, step):
        return os.path.join(self.args.ckpt_dir, "global_step_%d" % step)

    def save_checkpoint(self, step):
        self.phase = "checkpoint"
        path = self.checkpoint_path(step)
        self.log.info("saving checkpoint to %s", path)
        t0 = time.perf_counter()
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": step},
                       os.path.join(path, "model_optim.pt"))
        states = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(self.data_state, states, dst=0)
        if self.rank == 0:
            torch.save(states, os.path.join(path, "dataloader_states.pt"))
        dist.barrier()
        self.log.info("checkpoint saved: %s (%.2fs)", path, time.perf_counter() - t0)

    def log_step(self, step, m, step_time, t_rollout, t_train):
        self.log.info("step %d loss %.4f grad_norm %.4f step_time %.3f rollout_time %.3f train_time %.3f "
                      "reward_mean %.4f lr %.2e", step, m["loss"], m["grad_norm"], step_time, t_rollout,
                      t_train, m["reward"], self.lr_at(step))

    def check_finite(self, step, m):
        pass

    def sync(self):
        if self.args.backend == "nccl":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ loop
    def fit(self):
        a = self.args
        self.log.info("training for %d steps", a.steps)
        for step in range(1, a.steps + 1):
            self.step = step
            t0 = time.perf_counter()
            batch = self.rollout(step)
            self.sync()
            t1 = time.perf_counter()
            loss, grad_norm = self.train_step(step, batch)
            self.sync()
            t2 = time.perf_counter()
            m = self.reduce_metrics(step, {"loss": loss, "grad_norm": grad_norm,
                                           "reward": batch["rewards"].mean()})
            self.log_step(step, m, time.perf_counter() - t0, t1 - t0, t2 - t1)
            self.check_finite(step, m)
            if a.eval_every and step % a.eval_every == 0:
                self.evaluate(step)
            if a.ckpt_every and step % a.ckpt_every == 0:
                self.save_checkpoint(step)
        self.phase = "done"
        self.log.info("training finished after %d steps", a.steps)

    def shutdown(self):
        self._stop_hb.set()
        dist.barrier()
        dist.destroy_process_group()
        self.log.info("process group destroyed, exiting")

    def run(self):
        self.setup()
        self.fit()
        self.shutdown()


def main(trainer_cls, description="", add_args=None):
    parser = build_parser(description)
    if add_args:
        add_args(parser)
    args = parser.parse_args()
    trainer_cls(args).run()
