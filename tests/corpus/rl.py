"""Reinforcement-learning loops on a small deterministic pole-balancing environment (CartPole's
shape: 4 observations, 2 actions, reward 1 per step until the pole falls)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

from ._loop import Attach, HealthyLoop, LoopRun, attached, generator

GAMMA = 0.99
EPS = torch.finfo(torch.float32).eps


class Pole:
    """A linearised cart-pole: an episode lasts until the angle leaves +-0.2 or 30 steps."""

    def __init__(self, seed: int) -> None:
        self._gen = generator(seed)
        self.state = torch.zeros(4)
        self.t = 0

    def reset(self) -> torch.Tensor:
        self.state = 0.05 * torch.randn(4, generator=self._gen)
        self.t = 0
        return self.state

    def step(self, action: int) -> tuple[torch.Tensor, float, bool]:
        x, v, angle, omega = self.state.tolist()
        force = 1.0 if action == 1 else -1.0
        omega += 0.05 * (9.8 * angle - force)
        v += 0.05 * force
        self.state = torch.tensor([x + 0.05 * v, v, angle + 0.05 * omega, omega])
        self.t += 1
        return self.state, 1.0, abs(angle) > 0.2 or self.t >= 30


class Policy(nn.Module):
    """github:pytorch/examples reinforcement_learning/actor_critic.py ``Policy``: a shared layer,
    an action head (softmax) and a value head."""

    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.action_head = nn.Linear(32, 2)
        self.value_head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


def _returns(rewards: list[float]) -> torch.Tensor:
    out: list[float] = []
    r = 0.0
    for reward in rewards[::-1]:
        r = reward + GAMMA * r
        out.insert(0, r)
    returns = torch.tensor(out)
    return (returns - returns.mean()) / (returns.std() + EPS)


def actor_critic(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adam lr 3e-2; one update per episode: policy losses ``-log_prob * advantage`` plus
    smooth-L1 value losses. The twin forgets ``optimizer.zero_grad()``."""
    torch.manual_seed(543)
    model = Policy()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    env = Pole(543)
    run = LoopRun()
    with attached(attach, [(model, optimizer)], run):
        for _ in range(steps):
            state, done, saved, rewards = env.reset(), False, [], []
            while not done:
                probs, value = model(state)
                m = Categorical(probs)
                action = m.sample()
                saved.append((m.log_prob(action), value))
                state, reward, done = env.step(int(action.item()))
                rewards.append(reward)
            policy_losses, value_losses = [], []
            for (log_prob, value), ret in zip(saved, _returns(rewards)):
                policy_losses.append(-log_prob * (ret - value.item()))
                value_losses.append(F.smooth_l1_loss(value, ret.reshape(1)))
            if not planted:
                optimizer.zero_grad()
            loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
            loss.backward()
            optimizer.step()
            run.losses.append(float(len(rewards)))
    return run


class ReinforcePolicy(nn.Module):
    """github:pytorch/examples reinforcement_learning/reinforce.py ``Policy`` (dropout kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=-1)


def reinforce(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """Adam lr 1e-2, ``-log_prob * R`` summed per episode. The twin builds the optimizer over
    a second ``Policy()`` (a notebook cell run twice): the acting policy is never stepped."""
    torch.manual_seed(543)
    policy = ReinforcePolicy()
    optimizer = torch.optim.Adam((ReinforcePolicy() if planted else policy).parameters(), lr=1e-2)
    env = Pole(544)
    run = LoopRun()
    with attached(attach, [(policy, optimizer)], run):
        for _ in range(steps):
            state, done, log_probs, rewards = env.reset(), False, [], []
            while not done:
                m = Categorical(policy(state))
                action = m.sample()
                log_probs.append(m.log_prob(action))
                state, reward, done = env.step(int(action.item()))
                rewards.append(reward)
            optimizer.zero_grad()
            loss = torch.stack([-lp * r for lp, r in zip(log_probs, _returns(rewards))]).sum()
            loss.backward()
            optimizer.step()
            run.losses.append(float(len(rewards)))
    return run


def ddpg(steps: int, attach: Attach | None, planted: bool) -> LoopRun:
    """github:sfujim/TD3 DDPG.py: actor and critic (Adam lr 1e-4 / 1e-3 there, both 1e-3 here
    for a short run), the critic on the TD target of soft-updated target networks (tau 0.005),
    the actor on ``-critic(s, actor(s))``: its backward lands in the critic's ``.grad`` after
    the critic's step; the critic zeroes before its next backward. The twin forgets
    ``critic_optimizer.zero_grad()``."""
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1), nn.Tanh())
    critic = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 1))
    actor_target, critic_target = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    gen = generator(0)
    run = LoopRun()
    with attached(attach, [(critic, critic_opt), (actor, actor_opt)], run):
        for _ in range(steps):
            state = torch.randn(32, 4, generator=gen)
            action = (torch.randn(32, 1, generator=gen) * 0.5).clamp(-1, 1)
            reward = -(state[:, :1] - action).abs()
            next_state = state + 0.1 * torch.randn(32, 4, generator=gen)
            with torch.no_grad():
                target_q = critic_target(torch.cat([next_state, actor_target(next_state)], 1))
                target_q = reward + GAMMA * 0.5 * target_q
            current_q = critic(torch.cat([state, action], 1))
            critic_loss = F.mse_loss(current_q, target_q)
            if not planted:
                critic_opt.zero_grad()
            critic_loss.backward()
            critic_opt.step()
            actor_loss = -critic(torch.cat([state, actor(state)], 1)).mean()
            actor_opt.zero_grad()
            actor_loss.backward()
            actor_opt.step()
            with torch.no_grad():
                for net, target in ((critic, critic_target), (actor, actor_target)):
                    for p, tp in zip(net.parameters(), target.parameters()):
                        tp.data.copy_(0.005 * p.data + 0.995 * tp.data)
            run.losses.append(critic_loss.item())
    return run


LOOPS = (
    HealthyLoop(
        "actor_critic",
        "github:pytorch/examples reinforcement_learning/actor_critic.py",
        "rl",
        "optimizer.zero_grad() forgotten",
        "grads_not_reset",
        actor_critic,
    ),
    HealthyLoop(
        "reinforce",
        "github:pytorch/examples reinforcement_learning/reinforce.py",
        "rl",
        "the optimizer built over another Policy()",
        "params_trained_by_no_optimizer",
        reinforce,
    ),
    HealthyLoop(
        "ddpg",
        "github:sfujim/TD3 DDPG.py",
        "rl",
        "critic_optimizer.zero_grad() forgotten",
        "grads_not_reset",
        ddpg,
    ),
)
